//! `firn log …`: the tagged shared log through a node's HTTP API (`firn_client::LogClient`).

use clap::{Args, Subcommand};
use firn_client::{ClientError, LogClient, LogReadOptions};

use crate::http::HttpTarget;
use firn_model::time::parse_read_time;
use firn_model::{Key, LogRecord, LogSeq, NewRecord, ReadConsistency};

/// The log and tag a read reads, how it reads, and from which node.
#[derive(Args)]
pub struct TagRead {
    /// The log's name.
    log: String,
    /// The tag to read (a stream: its key, the log's name).
    tag: String,
    /// Read the log as it was at this time (µs, RFC 3339, or WALL-LOGICAL).
    #[arg(long)]
    at: Option<String>,
    /// Read this replica as it is (fastest, possibly stale).
    #[arg(long, conflicts_with = "lease")]
    local: bool,
    /// A linearizable read that trusts the leader's lease.
    #[arg(long)]
    lease: bool,
    #[command(flatten)]
    target: HttpTarget,
}

#[derive(Args)]
pub struct Block {
    /// When no record matches yet, wait up to this many ms for one (1 to 3600000).
    #[arg(long)]
    block_ms: Option<u64>,
}

#[derive(Subcommand)]
pub enum LogAction {
    /// Append records with the given tags (one record per VALUE, one batch); prints each
    /// record's seq.
    Append {
        /// The log's name.
        log: String,
        /// A tag of every record (repeat for more; the first decides where they are stored).
        #[arg(long = "tag", required = true)]
        tags: Vec<String>,
        /// The records' payloads, as text: one record each.
        #[arg(required = true)]
        values: Vec<String>,
        #[command(flatten)]
        target: HttpTarget,
    },
    /// The first record with TAG at or after --min (default: the first).
    Next {
        #[command(flatten)]
        on: TagRead,
        /// The least seq to return: MS-N, or MS for the millisecond's first.
        #[arg(long, value_parser = seq_from)]
        min: Option<LogSeq>,
        #[command(flatten)]
        block: Block,
    },
    /// The last record with TAG at or before --max (default: the newest).
    Prev {
        #[command(flatten)]
        on: TagRead,
        /// The greatest seq to return: MS-N, or MS for the millisecond's last.
        #[arg(long, value_parser = seq_to)]
        max: Option<LogSeq>,
    },
    /// The newest record with TAG.
    Tail {
        #[command(flatten)]
        on: TagRead,
        #[command(flatten)]
        block: Block,
    },
    /// Records with TAG from --from to --to (inclusive), oldest first.
    Range {
        #[command(flatten)]
        on: TagRead,
        /// The first seq of the range (MS-N, or MS); default: the first record kept (a seq
        /// below the tag's trim point answers TRIMMED with its first kept seq).
        #[arg(long, value_parser = seq_from)]
        from: Option<LogSeq>,
        /// The last seq of the range (MS-N, or MS for its last); default: the end.
        #[arg(long, value_parser = seq_to)]
        to: Option<LogSeq>,
        /// Most records to print (1 to 10000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[command(flatten)]
        block: Block,
    },
    /// Drop the records below --before (of --tag only, or of every tag); later reads below
    /// it answer TRIMMED.
    Trim {
        /// The log's name.
        log: String,
        /// The first seq to keep (MS-N, or MS).
        #[arg(long, value_parser = seq_from)]
        before: LogSeq,
        /// Trim this tag only (default: every tag of the log).
        #[arg(long)]
        tag: Option<String>,
        #[command(flatten)]
        target: HttpTarget,
    },
    /// What TAG holds: records, first and last seqs, the trim point, records ever added.
    Info {
        /// The log's name.
        log: String,
        /// The tag (a stream: its key).
        tag: String,
        #[command(flatten)]
        target: HttpTarget,
    },
}

impl TagRead {
    /// The client to read with and how.
    fn start(&self, block_ms: Option<u64>) -> Result<(LogClient, LogReadOptions), String> {
        let opts = LogReadOptions {
            block_ms,
            at: self
                .at
                .as_deref()
                .map(parse_read_time)
                .transpose()
                .map_err(|e| e.to_string())?,
            consistency: if self.local {
                ReadConsistency::Local
            } else if self.lease {
                ReadConsistency::Lease
            } else {
                ReadConsistency::Linearizable
            },
        };
        Ok((self.target.log_client(), opts))
    }

    /// Prints the one record a next/prev/tail found; finding none is a failure, as `firn
    /// get` of an absent key is.
    fn print_found(&self, found: Result<Option<LogRecord>, ClientError>) -> Result<(), String> {
        match found.map_err(|e| e.to_string())? {
            Some(r) => {
                print_record(&r);
                Ok(())
            }
            None => Err(format!("{}/{}: no record", self.log, self.tag)),
        }
    }
}

/// A seq that starts a range: `<ms>-<n>`, or `<ms>` for the millisecond's first.
fn seq_from(s: &str) -> Result<LogSeq, String> {
    LogSeq::parse_bound(s, false).map_err(|e| e.to_string())
}

/// A seq that ends a range: `<ms>-<n>`, or `<ms>` for the millisecond's last.
fn seq_to(s: &str) -> Result<LogSeq, String> {
    LogSeq::parse_bound(s, true).map_err(|e| e.to_string())
}

/// `SEQ  TAG,TAG  VALUE`.
fn print_record(r: &LogRecord) {
    let tags: Vec<String> = r.tags.iter().map(Key::to_string).collect();
    println!(
        "{}  {}  {}",
        r.seq,
        tags.join(","),
        String::from_utf8_lossy(&r.payload)
    );
}

pub async fn run_log(action: LogAction) -> Result<(), String> {
    let client = |t: &HttpTarget| t.log_client();
    let show = |e: ClientError| e.to_string();
    match action {
        LogAction::Append {
            log,
            tags,
            values,
            target,
        } => {
            let tags = tags
                .into_iter()
                .map(|t| Key::new(t.into_bytes()).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            let records: Vec<NewRecord> = values
                .into_iter()
                .map(|v| NewRecord {
                    tags: tags.clone(),
                    payload: v.into_bytes().into(),
                })
                .collect();
            for a in client(&target).append(&log, &records).await.map_err(show)? {
                println!("{}  commit {}", a.seq, a.commit_ts);
            }
            Ok(())
        }
        LogAction::Next { on, min, block } => {
            let (client, opts) = on.start(block.block_ms)?;
            let min = min.unwrap_or(LogSeq::ZERO);
            on.print_found(client.next(&on.log, &on.tag, min, &opts).await)
        }
        LogAction::Prev { on, max } => {
            let (client, opts) = on.start(None)?;
            let max = max.unwrap_or(LogSeq::MAX);
            on.print_found(client.prev(&on.log, &on.tag, max, &opts).await)
        }
        LogAction::Tail { on, block } => {
            let (client, opts) = on.start(block.block_ms)?;
            on.print_found(client.tail(&on.log, &on.tag, &opts).await)
        }
        LogAction::Range {
            on,
            from,
            to,
            limit,
            block,
        } => {
            let (client, opts) = on.start(block.block_ms)?;
            let to = to.unwrap_or(LogSeq::MAX);
            for r in client
                .range(&on.log, &on.tag, from, to, limit, &opts)
                .await
                .map_err(show)?
            {
                print_record(&r);
            }
            Ok(())
        }
        LogAction::Trim {
            log,
            before,
            tag,
            target,
        } => {
            let removed = client(&target)
                .trim(&log, tag.as_deref(), before)
                .await
                .map_err(show)?;
            println!("removed {removed}");
            Ok(())
        }
        LogAction::Info { log, tag, target } => {
            let info = client(&target).info(&log, &tag).await.map_err(show)?;
            let seq = |s: Option<LogSeq>| s.map_or("-".into(), |s| s.to_string());
            println!(
                "len {}  first {}  last {}  first_kept {}  added {}",
                info.len,
                seq(info.first_seq),
                seq(info.last_seq),
                info.first_kept,
                info.added
            );
            Ok(())
        }
    }
}

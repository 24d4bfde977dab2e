//! `firn group …`: consumer groups of streams through a node's HTTP API
//! (`firn_client::GroupClient`). Entries print as `ID  field=value …`.

use clap::{Args, Subcommand};
use firn_client::{
    ClientError, GroupClient, GroupCreate, GroupReadOptions, PendingQuery, StreamEntry,
};
use firn_model::LogSeq;

use crate::http::HttpTarget;

/// The stream and group a command is about, and the node.
#[derive(Args)]
pub struct OnGroup {
    /// The stream's key.
    stream: String,
    /// The consumer group's name.
    group: String,
    #[command(flatten)]
    target: HttpTarget,
}

/// How a group is made and deals its entries.
#[derive(Args)]
pub struct CreateOptions {
    /// `$`, `0` (the whole stream), or an entry id.
    #[arg(long, default_value = "$")]
    start: String,
    /// Make the stream if it does not exist.
    #[arg(long)]
    mkstream: bool,
    /// How entries are dealt: first, roundrobin or hrw.
    #[arg(long)]
    policy: Option<String>,
    /// hrw: the field whose value is an entry's key (default `key`).
    #[arg(long, conflicts_with = "key_tag")]
    key_field: Option<String>,
    /// hrw: an entry's key is its first tag other than the stream.
    #[arg(long)]
    key_tag: bool,
    /// Deliver again an entry not acked this many ms after its delivery.
    #[arg(long)]
    ack_wait_ms: Option<u64>,
    /// Move an entry delivered this many times to --dead-letter.
    #[arg(long, requires = "dead_letter")]
    max_deliver: Option<u64>,
    /// The stream an entry goes to after --max-deliver deliveries (same slot as STREAM:
    /// give both a `{tag}`).
    #[arg(long, requires = "max_deliver")]
    dead_letter: Option<String>,
    /// A consumer not heard from this many ms is no longer live.
    #[arg(long)]
    liveness_ms: Option<u64>,
}

impl From<CreateOptions> for GroupCreate {
    fn from(o: CreateOptions) -> Self {
        GroupCreate {
            start: o.start,
            mkstream: o.mkstream,
            policy: o.policy,
            key_field: o.key_field,
            key_tag: o.key_tag,
            ack_wait_ms: o.ack_wait_ms,
            max_deliver: o.max_deliver,
            dead_letter: o.dead_letter,
            liveness_ms: o.liveness_ms,
        }
    }
}

#[derive(Subcommand)]
pub enum GroupAction {
    /// Make a group of STREAM that starts after --start ($: the stream's last entry).
    Create {
        #[command(flatten)]
        on: OnGroup,
        #[command(flatten)]
        how: CreateOptions,
    },
    /// Destroy a group (its pending list and consumers).
    Destroy {
        #[command(flatten)]
        on: OnGroup,
    },
    /// Read as CONSUMER: new entries, or with --id its own pending ones after the id.
    Read {
        #[command(flatten)]
        on: OnGroup,
        /// The consumer reading (made on its first read).
        consumer: String,
        /// Most entries (1 to 10000; default 100).
        #[arg(long)]
        count: Option<u64>,
        /// When nothing is new, wait up to this many ms (1 to 3600000).
        #[arg(long)]
        block_ms: Option<u64>,
        /// Do not add the entries to the pending list.
        #[arg(long)]
        no_ack: bool,
        /// Read the consumer's own pending entries after this id (0: all of them) instead
        /// of new ones.
        #[arg(long, value_parser = entry_id)]
        id: Option<LogSeq>,
    },
    /// Acknowledge entries: prints how many were pending.
    Ack {
        #[command(flatten)]
        on: OnGroup,
        /// The entries' ids.
        #[arg(required = true, value_parser = entry_id)]
        ids: Vec<LogSeq>,
    },
    /// The pending list: a summary, or entry by entry with any of the options.
    Pending {
        #[command(flatten)]
        on: OnGroup,
        /// The least id to list (default: the first).
        #[arg(long, value_parser = entry_id)]
        start: Option<LogSeq>,
        /// The greatest id to list (default: the last).
        #[arg(long, value_parser = entry_id)]
        end: Option<LogSeq>,
        /// Most entries to list (1 to 10000; default 100).
        #[arg(long)]
        count: Option<u64>,
        /// Only this consumer's entries.
        #[arg(long)]
        consumer: Option<String>,
        /// Only entries delivered at least this many ms ago.
        #[arg(long)]
        min_idle_ms: Option<u64>,
    },
    /// The groups of STREAM, or with GROUP the group's consumers.
    Info {
        /// The stream's key.
        stream: String,
        /// A group, to list its consumers.
        group: Option<String>,
        #[command(flatten)]
        target: HttpTarget,
    },
    /// Follow CONSUMER's event stream: its pending entries, then new ones as they come;
    /// prints each and acks it (unless --no-ack). Ends after --count entries, or never.
    Consume {
        #[command(flatten)]
        on: OnGroup,
        /// The consumer to follow as (made on its first read).
        consumer: String,
        /// Entries to print, then end (default: follow without end).
        #[arg(long)]
        count: Option<u64>,
        /// Do not ack: the entries are delivered without entering the pending list.
        #[arg(long)]
        no_ack: bool,
    },
}

fn entry_id(s: &str) -> Result<LogSeq, String> {
    LogSeq::parse_bound(s, false).map_err(|e| e.to_string())
}

/// `ID  field=value field=value` (a deleted entry: `ID  (deleted)`).
fn print_entry(e: &StreamEntry) {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let body = if e.deleted {
        "(deleted)".to_string()
    } else if let Some(v) = &e.value {
        text(v)
    } else {
        e.fields
            .iter()
            .map(|(f, v)| format!("{}={}", text(f), text(v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("{}  {body}", e.id);
}

impl OnGroup {
    fn client(&self) -> GroupClient {
        self.target.group_client()
    }
}

pub async fn run_group(action: GroupAction) -> Result<(), String> {
    let show = |e: ClientError| e.to_string();
    match action {
        GroupAction::Create { on, how } => {
            let how = GroupCreate::from(how);
            on.client()
                .create(&on.stream, &on.group, &how)
                .await
                // The node says it as Redis does, naming XGROUP's word; here it is a flag.
                .map_err(|e| show(e).replace("the MKSTREAM option", "--mkstream"))?;
            println!("created {}", on.group);
        }
        GroupAction::Destroy { on } => {
            if !on
                .client()
                .destroy(&on.stream, &on.group)
                .await
                .map_err(show)?
            {
                return Err(format!("{}: no group {}", on.stream, on.group));
            }
            println!("destroyed {}", on.group);
        }
        GroupAction::Read {
            on,
            consumer,
            count,
            block_ms,
            no_ack,
            id,
        } => {
            let opts = GroupReadOptions {
                count,
                block_ms,
                noack: no_ack,
                id,
            };
            let client = on.client();
            let entries = client.read(&on.stream, &on.group, &consumer, &opts).await;
            entries.map_err(show)?.iter().for_each(print_entry);
        }
        GroupAction::Ack { on, ids } => {
            let acked = on.client().ack(&on.stream, &on.group, &ids).await;
            println!("acked {}", acked.map_err(show)?);
        }
        GroupAction::Pending {
            on,
            start,
            end,
            count,
            consumer,
            min_idle_ms,
        } => {
            let client = on.client();
            if start.is_none()
                && end.is_none()
                && count.is_none()
                && consumer.is_none()
                && min_idle_ms.is_none()
            {
                let s = client.pending_summary(&on.stream, &on.group).await;
                let s = s.map_err(show)?;
                let seq = |s: Option<LogSeq>| s.map_or("-".into(), |s| s.to_string());
                println!(
                    "count {}  first {}  last {}",
                    s.count,
                    seq(s.first),
                    seq(s.last)
                );
                for (name, n) in s.consumers {
                    println!("{name}  {n}");
                }
            } else {
                let q = PendingQuery {
                    start,
                    end,
                    count,
                    consumer,
                    min_idle_ms,
                };
                for p in client
                    .pending(&on.stream, &on.group, &q)
                    .await
                    .map_err(show)?
                {
                    println!(
                        "{}  {}  idle {} ms  deliveries {}",
                        p.id, p.consumer, p.idle_ms, p.deliveries
                    );
                }
            }
        }
        GroupAction::Info {
            stream,
            group,
            target,
        } => {
            let client = target.group_client();
            match group {
                None => {
                    for g in client.groups(&stream).await.map_err(show)? {
                        println!(
                            "{}  consumers {}  pending {}  last_delivered {}",
                            g.name, g.consumers, g.pending, g.last_delivered
                        );
                    }
                }
                Some(group) => {
                    for c in client.consumers(&stream, &group).await.map_err(show)? {
                        println!("{}  pending {}  idle {} ms", c.name, c.pending, c.idle_ms);
                    }
                }
            }
        }
        GroupAction::Consume {
            on,
            consumer,
            count,
            no_ack,
        } => consume(on, consumer, count, no_ack).await?,
    }
    Ok(())
}

/// What a consumer says when a call to its node fails: a broken connection means the node
/// stopped or went away, and consuming can go on from where it was.
fn broke(seen: u64, e: ClientError) -> String {
    match e {
        ClientError::Connection(why) => format!(
            "the connection to the node broke after {seen} entries ({why}): it stopped or went \
             away; run firn group consume again to go on (entries not acked come again)"
        ),
        e => e.to_string(),
    }
}

/// Prints each entry of the consumer's event stream, then acks it (unless `no_ack`): an
/// entry is acked only once it is printed, so one lost on the way comes again.
async fn consume(
    on: OnGroup,
    consumer: String,
    count: Option<u64>,
    no_ack: bool,
) -> Result<(), String> {
    let show = |e: ClientError| e.to_string();
    let client = on.client();
    let events = client
        .events(&on.stream, &on.group, &consumer, count, no_ack)
        .await
        .map_err(show)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    // A thread of its own, not the blocking pool: the runtime's shutdown would wait for a
    // read that may never end, where a plain thread ends with the process.
    std::thread::spawn(move || {
        let mut events = events;
        loop {
            let next = events.next_entry();
            let end = !matches!(next, Ok(Some(_)));
            if tx.blocking_send(next).is_err() || end {
                return;
            }
        }
    });
    let mut seen = 0u64;
    while let Some(next) = rx.recv().await {
        let entry = match next {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            Err(e) => return Err(broke(seen, e)),
        };
        print_entry(&entry);
        if !no_ack {
            client
                .ack(&on.stream, &on.group, &[entry.id])
                .await
                .map_err(|e| broke(seen, e))?;
        }
        seen += 1;
    }
    // Without COUNT the stream has no end of its own: one that ends means the node stopped
    // or went away, which a supervisor must hear of (a non-zero exit), not take for done.
    match count {
        Some(n) if seen >= n => Ok(()),
        Some(n) => Err(format!(
            "the event stream ended after {seen} of {n} entries (the node stopped or went away)"
        )),
        None => Err(format!(
            "the node ended the event stream after {seen} entries (it stopped or went away); \
             run firn group consume again to go on (entries not acked come again)"
        )),
    }
}

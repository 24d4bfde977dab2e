//! A bank: accounts on every shard, transfers between them as transactions (`MULTI`, two
//! `INCRBY`, `EXEC`) across shards, and readers that read every account at once — by a
//! snapshot at the newest closed time, by a snapshot at a time a second in the past, and in a
//! transaction (`MULTI`, `MGET`, `EXEC`). Every read must see each transfer whole or not at
//! all: its accounts sum to the opening total. So must the accounts' newest values at the
//! end. A read of a snapshot at a time before the bank opened finds no account, and is not
//! counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use firn_client::Client;
use firn_model::{CommitTs, Key, ReadAt, ReadConsistency, SnapshotOf};
use redis::Value;
use redis::aio::MultiplexedConnection;

use crate::Rng;

/// How long one call may wait for its answer (a transaction may wait on keys others hold).
const CALL_MAX: Duration = Duration::from_secs(20);
/// Longest the accounts take to open, and the final sums to be read.
const SETUP_MAX: Duration = Duration::from_secs(30);
/// A snapshot in the past reads this far back.
const PAST: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Bank {
    pub accounts: Vec<String>,
    pub opening: i64,
    pub transferers: usize,
    /// Readers take turns at the three ways of reading.
    pub readers: usize,
}

/// How a reader read every account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReadKind {
    /// `FIRN.SNAPSHOT` at the newest time every shard has closed.
    Snapshot,
    /// `FIRN.SNAPSHOT AT` a second ago.
    SnapshotPast,
    /// `MULTI`, `MGET`, `EXEC`.
    Transaction,
}

/// What the bank's processes saw.
#[derive(Debug, Default)]
pub struct BankHistory {
    pub opening_total: i64,
    pub transfers_committed: usize,
    pub transfers_unknown: usize,
    /// Every read of all accounts: how, and the balances.
    pub reads: Vec<(ReadKind, Vec<i64>)>,
    /// The accounts' newest balances once every transfer was over.
    pub finally: Vec<i64>,
    /// Answers of a shape no transfer or read may have.
    pub wrong_answers: Vec<String>,
}

impl BankHistory {
    /// Every way the bank's sum was broken; empty when it never was.
    pub fn violations(&self) -> Vec<String> {
        let mut found: Vec<String> = self.wrong_answers.clone();
        for (kind, values) in &self.reads {
            let sum: i64 = values.iter().sum();
            if sum != self.opening_total {
                found.push(format!(
                    "a {kind:?} read saw a transfer in part: sum {sum}, not {}: {values:?}",
                    self.opening_total
                ));
            }
        }
        let sum: i64 = self.finally.iter().sum();
        if sum != self.opening_total {
            found.push(format!(
                "the accounts' newest balances sum to {sum}, not {}: {:?}",
                self.opening_total, self.finally
            ));
        }
        found
    }

    /// Operations checked: transfers (committed or not), reads, and the final read.
    pub fn operations(&self) -> usize {
        self.transfers_committed + self.transfers_unknown + self.reads.len() + 1
    }
}

impl Bank {
    /// Two accounts on each of `shards` shards, each opening at 100.
    pub fn new(shards: u32) -> Bank {
        Bank {
            accounts: (0..shards)
                .flat_map(|s| crate::keys_in_shard(shards, s, "bank/", 2))
                .collect(),
            opening: 100,
            transferers: 3,
            readers: 3,
        }
    }

    /// Opens the accounts, runs transfers and reads against `addrs` until `stop` is set,
    /// then reads the accounts' newest balances; an error when the bank could not be opened
    /// or read at the end.
    pub async fn record(
        &self,
        seed: u64,
        addrs: &[String],
        stop: Arc<AtomicBool>,
    ) -> Result<BankHistory, String> {
        self.open(addrs).await?;
        let transfers: Vec<_> = (0..self.transferers)
            .map(|p| {
                let (me, addrs, stop) = (self.clone(), addrs.to_vec(), stop.clone());
                tokio::spawn(async move {
                    me.transferer(Rng::for_process(seed, p), p, &addrs, &stop)
                        .await
                })
            })
            .collect();
        let readers: Vec<_> = (0..self.readers)
            .map(|p| {
                let (me, addrs, stop) = (self.clone(), addrs.to_vec(), stop.clone());
                tokio::spawn(async move { me.reader(p, &addrs, &stop).await })
            })
            .collect();
        let mut history = BankHistory {
            opening_total: self.opening * self.accounts.len() as i64,
            ..BankHistory::default()
        };
        for t in transfers {
            let (committed, unknown, wrong) =
                t.await.map_err(|e| format!("a transfer failed: {e}"))?;
            history.transfers_committed += committed;
            history.transfers_unknown += unknown;
            history.wrong_answers.extend(wrong);
        }
        for r in readers {
            let (reads, wrong) = r.await.map_err(|e| format!("a reader failed: {e}"))?;
            history.reads.extend(reads);
            history.wrong_answers.extend(wrong);
        }
        history.finally = self.newest(&addrs[0]).await?;
        Ok(history)
    }

    /// Every account set to the opening balance, in one transaction (sent again until it
    /// answers: setting is idempotent).
    async fn open(&self, addrs: &[String]) -> Result<(), String> {
        let deadline = Instant::now() + SETUP_MAX;
        let mut next = 0;
        while Instant::now() < deadline {
            let Some(mut c) = connect_any(addrs, &mut next, deadline).await else {
                break;
            };
            let mut pipe = redis::pipe();
            pipe.atomic();
            for k in &self.accounts {
                pipe.set(k, self.opening).ignore();
            }
            if pipe.query_async::<Value>(&mut c).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("the bank's accounts did not open in {SETUP_MAX:?}"))
    }

    /// Transfers until `stop`: (committed, of unknown outcome, wrong answers).
    async fn transferer(
        &self,
        mut rng: Rng,
        p: usize,
        addrs: &[String],
        stop: &AtomicBool,
    ) -> (usize, usize, Vec<String>) {
        let (mut committed, mut unknown, mut wrong) = (0, 0, Vec::new());
        let mut next = p;
        let mut conn = None;
        while !stop.load(Ordering::Relaxed) {
            let Some(c) = connection(&mut conn, addrs, &mut next).await else {
                continue;
            };
            let n = self.accounts.len() as u64;
            let from = &self.accounts[rng.below(n) as usize];
            let to = &self.accounts[rng.below(n) as usize];
            let amount = 1 + rng.below(10) as i64;
            let sent: redis::RedisResult<Value> = redis::pipe()
                .atomic()
                .incr(from, -amount)
                .incr(to, amount)
                .query_async(c)
                .await;
            let both_counted =
                |a: &[Value]| a.len() == 2 && a.iter().all(|v| matches!(v, Value::Int(_)));
            match sent {
                Ok(Value::Array(a)) if both_counted(&a) => committed += 1,
                Ok(other) => wrong.push(format!("a transfer answered {other:?}")),
                // A node killed, a leader moving: applied whole or not at all, which the
                // sums check.
                Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                    unknown += 1;
                    conn = None;
                }
                // Refused (TRYAGAIN: keys held, a leader moving; NOSPACE; CLOCKSKEW) or
                // UNCERTAIN: whole or not at all either way.
                Err(e) => {
                    unknown += (e.code() == Some("UNCERTAIN")) as usize;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        (committed, unknown, wrong)
    }

    /// Reads every account until `stop`, reader `p` starting with its own way of reading and
    /// taking the next one each time.
    async fn reader(
        &self,
        p: usize,
        addrs: &[String],
        stop: &AtomicBool,
    ) -> (Vec<(ReadKind, Vec<i64>)>, Vec<String>) {
        let kinds = [
            ReadKind::Snapshot,
            ReadKind::SnapshotPast,
            ReadKind::Transaction,
        ];
        let (mut reads, mut wrong) = (Vec::new(), Vec::new());
        let mut next = p + 1;
        let mut conn = None;
        let mut turn = p;
        while !stop.load(Ordering::Relaxed) {
            let kind = kinds[turn % kinds.len()];
            turn += 1;
            let read = match kind {
                ReadKind::Snapshot | ReadKind::SnapshotPast => {
                    let at = (kind == ReadKind::SnapshotPast).then(|| {
                        let now_us = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .expect("a clock after 1970")
                            .as_micros() as u64;
                        CommitTs::end_of_micros(now_us - PAST.as_micros() as u64)
                    });
                    next += 1;
                    self.snapshot(&addrs[next % addrs.len()], at).await
                }
                ReadKind::Transaction => {
                    let Some(c) = connection(&mut conn, addrs, &mut next).await else {
                        continue;
                    };
                    let answer = redis::pipe()
                        .atomic()
                        .mget(&self.accounts)
                        .query_async::<(Vec<Option<i64>>,)>(c)
                        .await;
                    match answer {
                        Ok((values,)) => Ok(values),
                        Err(e) => {
                            if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                                conn = None;
                            }
                            Err(e.to_string())
                        }
                    }
                }
            };
            match read {
                // No account yet: a snapshot at a time before the bank opened.
                Ok(values) if values.iter().all(Option::is_none) => {}
                Ok(values) if values.iter().any(Option::is_none) => wrong.push(format!(
                    "a {kind:?} read found some accounts and not others: {values:?}"
                )),
                Ok(values) => reads.push((kind, values.into_iter().flatten().collect())),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        (reads, wrong)
    }

    /// Every account as of one time across the shards (`FIRN.SNAPSHOT`) through `addr`.
    async fn snapshot(&self, addr: &str, at: Option<CommitTs>) -> Result<Vec<Option<i64>>, String> {
        let call = async {
            let client = Client::connect(addr).await.map_err(|e| e.to_string())?;
            let keys = self
                .accounts
                .iter()
                .map(|k| Key::new(bytes::Bytes::from(k.clone())).expect("a valid key"))
                .collect();
            let (_, found) = client
                .snapshot(&SnapshotOf::Keys(keys), at)
                .await
                .map_err(|e| e.to_string())?;
            Ok(found
                .into_iter()
                .map(|(_, v)| {
                    let value = v.and_then(|v| v.value)?;
                    Some(
                        String::from_utf8_lossy(&value)
                            .parse()
                            .unwrap_or(i64::MIN / 4),
                    )
                })
                .collect())
        };
        tokio::time::timeout(CALL_MAX, call)
            .await
            .unwrap_or_else(|_| Err("no answer".into()))
    }

    /// The accounts' newest balances, read linearizably (tried again while leaders settle).
    async fn newest(&self, addr: &str) -> Result<Vec<i64>, String> {
        let read = async {
            let client = Client::connect(addr).await.map_err(|e| e.to_string())?;
            let mut balances = Vec::new();
            for k in &self.accounts {
                let got = firn_client::retry_transient(|| {
                    client.get(k.as_bytes(), ReadAt::Latest, ReadConsistency::Linearizable)
                })
                .await
                .map_err(|e| format!("reading {k}: {e}"))?;
                let value = got.and_then(|v| v.value).unwrap_or_default();
                balances.push(
                    String::from_utf8_lossy(&value)
                        .parse()
                        .unwrap_or(i64::MIN / 4),
                );
            }
            Ok::<_, String>(balances)
        };
        tokio::time::timeout(SETUP_MAX, read)
            .await
            .unwrap_or_else(|_| Err(format!("the final balances were not read in {SETUP_MAX:?}")))
    }
}

/// The connection in `slot`, or a new one to the next node of `addrs` that answers.
async fn connection<'a>(
    slot: &'a mut Option<MultiplexedConnection>,
    addrs: &[String],
    next: &mut usize,
) -> Option<&'a mut MultiplexedConnection> {
    if slot.is_none() {
        *slot = connect_any(addrs, next, Instant::now() + Duration::from_secs(1)).await;
    }
    slot.as_mut()
}

/// A connection to the first node of `addrs` that answers, starting at `next`, before
/// `deadline`.
pub async fn connect_any(
    addrs: &[String],
    next: &mut usize,
    deadline: Instant,
) -> Option<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(CALL_MAX))
        .set_connection_timeout(Some(Duration::from_secs(2)));
    while Instant::now() < deadline {
        let addr = &addrs[*next % addrs.len()];
        *next += 1;
        if let Ok(client) = redis::Client::open(format!("redis://{addr}/"))
            && let Ok(c) = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        {
            return Some(c);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(reads: Vec<Vec<i64>>, finally: Vec<i64>) -> BankHistory {
        BankHistory {
            opening_total: 300,
            reads: reads.into_iter().map(|r| (ReadKind::Snapshot, r)).collect(),
            finally,
            ..BankHistory::default()
        }
    }

    #[test]
    fn a_read_of_a_transfer_in_part_is_a_violation() {
        let whole = history(
            vec![vec![100, 100, 100], vec![90, 110, 100]],
            vec![95, 105, 100],
        );
        assert!(whole.violations().is_empty());
        // 10 taken from the first account, not yet given to the second.
        let torn = history(vec![vec![90, 100, 100]], vec![100, 100, 100]);
        let found = torn.violations();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("in part"), "{found:?}");
    }

    #[test]
    fn a_final_sum_off_the_total_is_a_violation() {
        let lost = history(vec![], vec![100, 100, 90]);
        assert!(lost.violations()[0].contains("newest balances"));
    }
}

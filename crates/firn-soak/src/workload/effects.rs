//! Functions next to the data, run once per input: a trigger on `in/` counts each key written
//! into `seen/<key>` and appends the key to the log `seen` under the tag `all`, in the run's
//! one transaction; timers set to fall due while the faults go on each add one to
//! `fired/<name>`. Writers put keys on every shard until the run stops. At the end every input
//! key (the keys that exist: a write answered with an error may have applied) must be counted
//! exactly once and appended exactly once, nothing else counted or appended, and every timer
//! fired exactly once.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::Value;
use redis::aio::MultiplexedConnection;

use super::bank::connect_any;

/// On each put, `incr("seen/" + key, 1)` — a count of the runs whose effects committed —
/// and `log_append("seen", ["all"], key)`, in the run's one transaction.
pub const COUNTER: &str = r#"(module
    (import "firn" "kind" (func $kind (result i32)))
    (import "firn" "key" (func $key (param i32 i32 i32) (result i32)))
    (import "firn" "incr" (func $incr (param i32 i32 i64) (result i32)))
    (import "firn" "log_append" (func $append (param i32 i32 i32 i32 i32 i32) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "seen/")
    (data (i32.const 8000) "seen")
    (data (i32.const 8010) "\03\00\00\00all")
    (func (export "run") (result i32)
        (local $n i32)
        (if (i32.ne (call $kind) (i32.const 1)) (then (return (i32.const 0))))
        (local.set $n (call $key (i32.const 0) (i32.const 5) (i32.const 4000)))
        (if (i32.lt_s (call $incr (i32.const 0) (i32.add (local.get $n) (i32.const 5)) (i64.const 1))
                      (i32.const 0))
            (then (return (i32.const 1))))
        (if (i32.lt_s (call $append (i32.const 8000) (i32.const 4) (i32.const 8010) (i32.const 7)
                                    (i32.const 5) (local.get $n))
                      (i32.const 0))
            (then (return (i32.const 1))))
        (i32.const 0)))"#;

/// On each firing, `incr("fired/" + payload, 1)`.
pub const FIRED: &str = r#"(module
    (import "firn" "arg" (func $arg (param i32 i32 i32) (result i32)))
    (import "firn" "incr" (func $incr (param i32 i32 i64) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "fired/")
    (func (export "run") (result i32)
        (local $n i32)
        (local.set $n (call $arg (i32.const 0) (i32.const 6) (i32.const 4000)))
        (if (i32.lt_s (call $incr (i32.const 0) (i32.add (local.get $n) (i32.const 6)) (i64.const 1))
                      (i32.const 0))
            (then (return (i32.const 1))))
        (i32.const 0)))"#;

/// How long a setup or final call may go on being sent to the nodes in turn.
const SETTLED_MAX: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct Effects {
    pub writers: usize,
    /// Pause between one writer's writes.
    pub think: Duration,
    /// Timers, due from 1 s after the start, `timer_every` apart.
    pub timers: usize,
    pub timer_every: Duration,
    /// Longest the trigger may take to catch up with the writes once they are over.
    pub catch_up_max: Duration,
}

/// What the checks found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub inputs: usize,
    pub timers: usize,
    /// Effects not once per input: a guarantee broken.
    pub violations: Vec<String>,
}

impl Default for Effects {
    fn default() -> Effects {
        Effects {
            writers: 3,
            think: Duration::from_millis(10),
            timers: 12,
            timer_every: Duration::from_millis(700),
            catch_up_max: Duration::from_secs(90),
        }
    }
}

impl Effects {
    /// Loads the functions, makes the trigger and sets the timers; done before the faults.
    pub async fn set_up(&self, addrs: &[String]) -> Result<(), String> {
        let count = wat::parse_str(COUNTER).expect("the counter is valid text");
        let fired = wat::parse_str(FIRED).expect("the timer function is valid text");
        settled(
            addrs,
            redis::cmd("FIRN.FUNCTION")
                .arg("LOAD")
                .arg("count")
                .arg(count),
        )
        .await?;
        settled(
            addrs,
            redis::cmd("FIRN.FUNCTION")
                .arg("LOAD")
                .arg("fired")
                .arg(fired),
        )
        .await?;
        settled(
            addrs,
            redis::cmd("FIRN.TRIGGER").arg(&[
                "CREATE", "counts", "ON", "PREFIX", "in/", "CALL", "count", "FROM", "0",
            ]),
        )
        .await?;
        for (i, name) in self.timer_names().iter().enumerate() {
            let in_ms = (1_000 + self.timer_every.as_millis() as usize * i).to_string();
            settled(
                addrs,
                redis::cmd("FIRN.TIMER")
                    .arg(&["SET", name, "IN", &in_ms, "CALL", "fired", "PAYLOAD", name]),
            )
            .await?;
        }
        Ok(())
    }

    fn timer_names(&self) -> Vec<String> {
        (0..self.timers).map(|i| format!("t{i}")).collect()
    }

    /// Writes keys under `in/` until `stop`, then checks every effect (after
    /// [`set_up`](Self::set_up)); an error when the trigger did not catch up or the timers
    /// did not fire in time.
    pub async fn record(&self, addrs: &[String], stop: Arc<AtomicBool>) -> Result<Outcome, String> {
        let writers: Vec<_> = (0..self.writers)
            .map(|w| {
                let (addrs, stop, think) = (addrs.to_vec(), stop.clone(), self.think);
                tokio::spawn(async move { write(w, &addrs, &stop, think).await })
            })
            .collect();
        for w in writers {
            w.await.map_err(|e| format!("a writer failed: {e}"))?;
        }
        self.check(addrs).await
    }

    async fn check(&self, addrs: &[String]) -> Result<Outcome, String> {
        let mut outcome = Outcome::default();
        // The inputs are the keys that exist (a write answered with an error may have
        // applied).
        let inputs = keys(addrs, "in/").await?;
        outcome.inputs = inputs.len();
        let want: BTreeSet<String> = inputs.iter().map(|k| format!("seen/{k}")).collect();
        let deadline = Instant::now() + self.catch_up_max;
        loop {
            let seen = keys(addrs, "seen/").await?;
            let extra: Vec<_> = seen.difference(&want).take(5).collect();
            if !extra.is_empty() {
                outcome
                    .violations
                    .push(format!("counted keys that were never written: {extra:?}"));
                return Ok(outcome);
            }
            if seen == want {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} of {} inputs counted {:?} after the writes",
                    seen.len(),
                    want.len(),
                    self.catch_up_max
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // Once caught up, a while more: a doubled run would show as a count of 2.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let want: Vec<String> = want.into_iter().collect();
        for chunk in want.chunks(500) {
            let counts = settled(addrs, redis::cmd("MGET").arg(chunk)).await?;
            let counts: Vec<Option<String>> =
                redis::from_redis_value(counts).map_err(|e| e.to_string())?;
            outcome.violations.extend(counted_once(chunk, &counts));
        }
        // And appended once each: the log's tag holds every input key exactly once.
        let range = redis::cmd("FIRN.LOG")
            .arg(&["RANGE", "seen", "all", "-", "+", "LIMIT", "10000"])
            .clone();
        let Value::Array(records) = settled(addrs, &range).await? else {
            return Err("FIRN.LOG RANGE answered no array".into());
        };
        let mut appended: Vec<String> = Vec::with_capacity(records.len());
        for r in &records {
            match r {
                Value::Array(parts) if parts.len() > 2 => appended
                    .push(redis::from_redis_value(parts[2].clone()).map_err(|e| e.to_string())?),
                other => outcome
                    .violations
                    .push(format!("FIRN.LOG RANGE answered {other:?}, not a record")),
            }
        }
        if let Some(mut violation) = appended_once(&inputs, appended.clone()) {
            // What the store says of a record's input and its counter when SCAN found
            // neither: read each by name, and its versions.
            for stranger in appended.iter().filter(|a| !inputs.contains(*a)).take(3) {
                for key in [stranger.clone(), format!("seen/{stranger}")] {
                    let value = settled(addrs, redis::cmd("GET").arg(&key)).await;
                    let versions = settled(
                        addrs,
                        redis::cmd("FIRN.HISTORY").arg(&key).arg("LIMIT").arg(5),
                    )
                    .await;
                    violation.push_str(&format!("; GET {key}: {value:?}, history: {versions:?}"));
                }
                // Whether each node's own scan, start to end on that node, lists it: a
                // miss on one node only is its replica's; none missing, a cursor that
                // moved between nodes.
                for addr in addrs {
                    let listed = keys(std::slice::from_ref(addr), "in/")
                        .await
                        .map(|found| found.contains(stranger));
                    violation.push_str(&format!("; SCAN on {addr} alone lists it: {listed:?}"));
                }
            }
            outcome.violations.push(violation);
        }
        self.check_timers(addrs, &mut outcome).await?;
        Ok(outcome)
    }

    async fn check_timers(&self, addrs: &[String], outcome: &mut Outcome) -> Result<(), String> {
        let want: Vec<String> = self
            .timer_names()
            .iter()
            .map(|t| format!("fired/{t}"))
            .collect();
        outcome.timers = want.len();
        if want.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + SETTLED_MAX;
        loop {
            let counts = settled(addrs, redis::cmd("MGET").arg(&want)).await?;
            let counts: Vec<Option<String>> =
                redis::from_redis_value(counts).map_err(|e| e.to_string())?;
            for (key, count) in want.iter().zip(&counts) {
                if !matches!(count.as_deref(), None | Some("1")) {
                    outcome
                        .violations
                        .push(format!("timer {key} fired {count:?} times"));
                }
            }
            if !outcome.violations.is_empty() || counts.iter().all(Option::is_some) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("timers still not fired: {counts:?}"));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Every count `"1"`: one violation per key counted otherwise (never, or more than once).
fn counted_once(keys: &[String], counts: &[Option<String>]) -> Vec<String> {
    keys.iter()
        .zip(counts)
        .filter(|(_, count)| count.as_deref() != Some("1"))
        .map(|(key, count)| format!("{key} counted {count:?} times"))
        .collect()
}

/// The records appended are the inputs, once each; the violation if not.
fn appended_once(inputs: &BTreeSet<String>, mut appended: Vec<String>) -> Option<String> {
    appended.sort();
    let once: Vec<&String> = inputs.iter().collect();
    let appended_refs: Vec<&String> = appended.iter().collect();
    (appended_refs != once).then(|| {
        let doubled = appended.windows(2).filter(|w| w[0] == w[1]).count();
        let missing = inputs
            .iter()
            .filter(|k| appended.binary_search(k).is_err())
            .count();
        let mut strangers: Vec<&String> =
            appended.iter().filter(|a| !inputs.contains(*a)).collect();
        strangers.dedup();
        strangers.truncate(5);
        format!(
            "{} records for {} inputs: {missing} inputs never appended, {doubled} appended twice \
             or more, records of no input: {strangers:?}",
            appended.len(),
            inputs.len()
        )
    })
}

/// One writer's keys `in/{w}-{i}`, until `stop`.
async fn write(w: usize, addrs: &[String], stop: &AtomicBool, think: Duration) {
    let mut attempted = 0usize;
    let mut next = w;
    let mut conn: Option<MultiplexedConnection> = None;
    while !stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            conn = connect_any(addrs, &mut next, Instant::now() + Duration::from_secs(1)).await;
        }
        let Some(c) = conn.as_mut() else {
            continue;
        };
        let key = format!("in/{w}-{attempted}");
        attempted += 1;
        let set: redis::RedisResult<()> = redis::cmd("SET").arg(&key).arg("1").query_async(c).await;
        if set.is_err() {
            conn = None;
        }
        tokio::time::sleep(think).await;
    }
}

/// A command sent to the nodes in turn until one answers it (a write sent again is a SET of
/// the same value, or of a definition that compares before it writes), within
/// [`SETTLED_MAX`].
pub async fn settled(addrs: &[String], cmd: &redis::Cmd) -> Result<Value, String> {
    let deadline = Instant::now() + SETTLED_MAX;
    let mut last = String::new();
    let mut next = 0;
    while Instant::now() < deadline {
        match connect_any(addrs, &mut next, deadline).await {
            Some(mut c) => match cmd.query_async::<Value>(&mut c).await {
                Ok(v) => return Ok(v),
                Err(e) => last = e.to_string(),
            },
            None => last = "no node answers".into(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("no node took {cmd:?} in {SETTLED_MAX:?}: {last}"))
}

/// Every key under `prefix`, through SCAN.
pub async fn keys(addrs: &[String], prefix: &str) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(&cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000);
        let Value::Array(reply) = settled(addrs, &cmd).await? else {
            return Err("SCAN answered no array".into());
        };
        let next: String = redis::from_redis_value(reply[0].clone()).map_err(|e| e.to_string())?;
        let found: Vec<String> =
            redis::from_redis_value(reply[1].clone()).map_err(|e| e.to_string())?;
        out.extend(found);
        if next == "0" {
            return Ok(out);
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn counts_other_than_one_are_violations() {
        let keys = names(&["seen/a", "seen/b", "seen/c"]);
        let counts = [Some("1".to_string()), Some("2".to_string()), None];
        let found = counted_once(&keys, &counts);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("seen/b") && found[1].contains("seen/c"));
        assert!(counted_once(&keys[..1], &counts[..1]).is_empty());
    }

    #[test]
    fn records_must_be_the_inputs_once_each() {
        let inputs: BTreeSet<String> = names(&["in/a", "in/b"]).into_iter().collect();
        assert_eq!(appended_once(&inputs, names(&["in/b", "in/a"])), None);
        let doubled = appended_once(&inputs, names(&["in/a", "in/b", "in/a"])).unwrap();
        assert!(doubled.contains("1 appended twice"), "{doubled}");
        let missing = appended_once(&inputs, names(&["in/a"])).unwrap();
        assert!(missing.contains("1 inputs never appended"), "{missing}");
        let stranger = appended_once(&inputs, names(&["in/a", "in/b", "in/c"])).unwrap();
        assert!(
            stranger.contains("records of no input: [\"in/c\"]"),
            "{stranger}"
        );
    }
}

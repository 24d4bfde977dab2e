//! One workload process's RESP connection: to its home node, moving on to the next node after
//! a failure, and telling a call that never took effect from one whose outcome is unknown.

use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;

/// How long one call may take before its outcome counts as unknown.
pub const OP_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause after a refusal (a node down, a leader being elected) before the next call.
const REFUSED_BACKOFF: Duration = Duration::from_millis(50);

/// A call's outcome.
#[derive(Debug)]
pub enum Called {
    Ok(Value),
    /// Refused before it took effect (TRYAGAIN, CLUSTERDOWN, NOSPACE, CLOCKSKEW, or no
    /// connection to send it on): it never happened.
    Refused,
    /// It may have taken effect (UNCERTAIN, another error, a timeout, a dropped connection).
    Unknown,
}

pub struct Node {
    addrs: Vec<String>,
    target: usize,
    con: Option<MultiplexedConnection>,
    /// Server errors other than the expected ones are printed, the first few.
    errors_told: usize,
    what: &'static str,
}

impl Node {
    /// A connection for the process of workload `what` whose home is `addrs[home % n]`.
    pub fn new(what: &'static str, addrs: &[String], home: usize) -> Node {
        Node {
            addrs: addrs.to_vec(),
            target: home,
            con: None,
            errors_told: 0,
            what,
        }
    }

    /// A crash: the connection is gone, with whatever the server did for it.
    pub fn drop_connection(&mut self) {
        self.con = None;
    }

    pub async fn call(&mut self, cmd: &redis::Cmd) -> Called {
        let called = self.send(cmd).await;
        if !matches!(called, Called::Ok(_)) {
            self.con = None;
            self.target += 1;
        }
        if matches!(called, Called::Refused) {
            tokio::time::sleep(REFUSED_BACKOFF).await;
        }
        called
    }

    async fn send(&mut self, cmd: &redis::Cmd) -> Called {
        if self.con.is_none() {
            let addr = &self.addrs[self.target % self.addrs.len()];
            let client = redis::Client::open(format!("redis://{addr}/")).expect("an address");
            let connect = client.get_multiplexed_async_connection();
            match tokio::time::timeout(OP_TIMEOUT, connect).await {
                Ok(Ok(con)) => self.con = Some(con),
                _ => return Called::Refused,
            }
        }
        let con = self.con.as_mut().expect("connected above");
        match tokio::time::timeout(OP_TIMEOUT, cmd.query_async::<Value>(con)).await {
            Ok(Ok(reply)) => Called::Ok(reply),
            Ok(Err(e))
                if matches!(
                    e.code(),
                    Some("TRYAGAIN" | "CLUSTERDOWN" | "NOSPACE" | "CLOCKSKEW")
                ) =>
            {
                Called::Refused
            }
            Ok(Err(e)) => {
                // Dropped connections are expected here; a server error other than
                // UNCERTAIN is not, and may be the harness's fault.
                if e.code().is_some_and(|c| c != "UNCERTAIN") && self.errors_told < 3 {
                    self.errors_told += 1;
                    eprintln!("{}: {e}", self.what);
                }
                Called::Unknown
            }
            Err(_) => Called::Unknown,
        }
    }
}

//! Redis as the reference: a real `redis-server` (no persistence, on a free loopback port)
//! and a Firn node get the same commands on one connection each, and their replies are
//! compared frame by frame. Where Firn claims a Redis command, an application must not see a
//! difference; a test lists the commands and any reply it must not compare (an id, a clock).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::types::BytesFrame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A `redis-server` this test started; stopped (killed) when dropped.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    /// Starts one; the suite's setup (scripts/test) installs redis-server.
    pub async fn start() -> RedisServer {
        let port = super::free_addr().port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (apt install redis-server; scripts/test installs it)");
        let server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One RESP2 connection that sends commands and reads replies as frames.
pub struct Raw {
    stream: TcpStream,
    input: BytesMut,
}

impl Raw {
    pub async fn connect(port: u16) -> Raw {
        Raw {
            stream: TcpStream::connect(("127.0.0.1", port)).await.unwrap(),
            input: BytesMut::new(),
        }
    }

    /// Sends one command (its words as bulk strings).
    pub async fn send(&mut self, words: &[&str]) {
        let mut out = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
            out.extend_from_slice(w.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).await.unwrap();
    }

    /// The next reply, within 5 s.
    pub async fn read(&mut self) -> BytesFrame {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some((frame, _, _)) = decode_bytes_mut(&mut self.input).unwrap() {
                return frame;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let n = tokio::time::timeout(left, self.stream.read_buf(&mut self.input))
                .await
                .expect("a reply within 5 s")
                .unwrap();
            assert!(n > 0, "the connection closed");
        }
    }

    /// Whether a reply comes within `wait` (none is what some commands answer).
    pub async fn read_within(&mut self, wait: Duration) -> Option<BytesFrame> {
        tokio::time::timeout(wait, self.read()).await.ok()
    }
}

/// A reply as text, to compare and to show.
pub fn show(frame: &BytesFrame) -> String {
    match frame {
        BytesFrame::SimpleString(s) => format!("+{}", String::from_utf8_lossy(s)),
        BytesFrame::Error(e) => format!("-{e}"),
        BytesFrame::Integer(i) => format!(":{i}"),
        BytesFrame::BulkString(b) => format!("${:?}", String::from_utf8_lossy(b)),
        BytesFrame::Array(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        BytesFrame::Null => "(nil)".into(),
    }
}

/// Firn and Redis side by side, one connection to each.
pub struct Both {
    pub firn: Raw,
    pub redis: Raw,
}

impl Both {
    pub async fn connect(firn_port: u16, redis: &RedisServer) -> Both {
        Both {
            firn: Raw::connect(firn_port).await,
            redis: Raw::connect(redis.port).await,
        }
    }

    /// Sends `words` to both and reads `replies` replies from each: the pairs that differ,
    /// as (command, Firn's, Redis's).
    pub async fn differences(&mut self, words: &[&str], replies: usize) -> Vec<String> {
        self.firn.send(words).await;
        self.redis.send(words).await;
        let mut differ = Vec::new();
        for _ in 0..replies {
            let (f, r) = (
                show(&self.firn.read().await),
                show(&self.redis.read().await),
            );
            if f != r {
                differ.push(format!("{}: Firn {f}, Redis {r}", words.join(" ")));
            }
        }
        differ
    }

    /// Every command of `script` (each with the count of replies it gets) sent to both: every
    /// difference, none expected.
    pub async fn same(&mut self, script: &[(&[&str], usize)]) {
        let mut differ = Vec::new();
        for (words, replies) in script {
            differ.extend(self.differences(words, *replies).await);
        }
        assert!(
            differ.is_empty(),
            "Firn differs from Redis:\n{}",
            differ.join("\n")
        );
    }
}

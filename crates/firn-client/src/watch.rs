//! A watch: its own blocking connection to a node (over TLS, one made here with the
//! client's own check of the node's certificate), and the events it reads.

use bytes::Bytes;
use firn_model::{VersionInfo, WatchFrom};
use redis::Value;

use crate::tls::TlsTarget;
use crate::{
    Client, ClientError, Result, TlsCa, as_bytes, as_text, as_u64, protocol, server_answer,
};

impl Client {
    /// Starts a watch on its own connection. Events arrive in commit order.
    pub fn watch(&self, subject: &[u8], prefix: bool, from: WatchFrom) -> Result<Watcher> {
        let mut conn = match &self.tls {
            None => WatchConn::Plain(
                self.client
                    .get_connection()
                    .map_err(|e| ClientError::Connection(e.to_string()))?,
            ),
            Some(ca) => WatchConn::tls(&self.addr, ca)?,
        };
        let mut cmd = redis::cmd("FIRN.WATCH");
        cmd.arg(subject);
        if prefix {
            cmd.arg("PREFIX");
        }
        match from {
            WatchFrom::Now => {}
            WatchFrom::Version(v) => {
                cmd.arg("VERSION").arg(v);
            }
            WatchFrom::Time(t) => {
                cmd.arg("TIME").arg(t.to_string());
            }
        }
        conn.send(&cmd)?;
        // The first answer confirms the watch, or is the error (e.g. COMPACTED).
        match server_answer(conn.recv()?)? {
            Value::Array(items)
                if items.first().and_then(as_bytes).as_deref() == Some(b"watching") => {}
            v => return Err(protocol(v)),
        }
        Ok(Watcher { conn })
    }
}

/// One event of a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    pub key: Bytes,
    pub info: VersionInfo,
}

/// A running watch; [`Watcher::next_event`] blocks until the next event.
pub struct Watcher {
    conn: WatchConn,
}

/// A watch's own blocking connection: the redis crate's, or over TLS one made here with
/// [`TlsCa`]'s check of the node's certificate (the redis crate's TLS takes a CA bundle
/// only), its replies parsed by the redis crate's parser.
enum WatchConn {
    Plain(redis::Connection),
    Tls {
        stream: Box<TlsLines>,
        parser: redis::Parser,
    },
}

/// A blocking TLS stream to a node, read through a buffer.
type TlsLines = std::io::BufReader<
    tokio_rustls::rustls::StreamOwned<tokio_rustls::rustls::ClientConnection, std::net::TcpStream>,
>;

impl WatchConn {
    /// Dials `addr` (`[user:password@]host:port`) over TLS, and signs in as it says.
    fn tls(addr: &str, ca: &TlsCa) -> Result<WatchConn> {
        let failed = |e: &dyn std::fmt::Display| ClientError::Connection(e.to_string());
        let target = TlsTarget::of(addr)?;
        let tcp = std::net::TcpStream::connect((target.host.as_str(), target.port))
            .map_err(|e| failed(&e))?;
        let _ = tcp.set_nodelay(true);
        let (info, name) = (target.info, target.name);
        let tls = tokio_rustls::rustls::ClientConnection::new(ca.http_config(), name)
            .map_err(|e| failed(&e))?;
        let mut conn = WatchConn::Tls {
            stream: Box::new(std::io::BufReader::new(
                tokio_rustls::rustls::StreamOwned::new(tls, tcp),
            )),
            parser: redis::Parser::new(),
        };
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            conn.send(&auth)?;
            server_answer(conn.recv()?)?;
        }
        Ok(conn)
    }

    fn send(&mut self, cmd: &redis::Cmd) -> Result<()> {
        match self {
            WatchConn::Plain(c) => Ok(c.send_packed_command(&cmd.get_packed_command())?),
            WatchConn::Tls { stream, .. } => {
                use std::io::Write;
                let s = stream.get_mut();
                s.write_all(&cmd.get_packed_command())
                    .and_then(|()| s.flush())
                    .map_err(|e| ClientError::Connection(e.to_string()))
            }
        }
    }

    fn recv(&mut self) -> Result<Value> {
        match self {
            WatchConn::Plain(c) => Ok(c.recv_response()?),
            WatchConn::Tls { stream, parser } => Ok(parser.parse_value(stream.as_mut())?),
        }
    }

    fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        match self {
            WatchConn::Plain(c) => Ok(c.set_read_timeout(timeout)?),
            WatchConn::Tls { stream, .. } => stream
                .get_ref()
                .sock
                .set_read_timeout(timeout)
                .map_err(|e| ClientError::Connection(e.to_string())),
        }
    }
}

impl Watcher {
    pub fn set_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        self.conn.set_read_timeout(timeout)
    }

    pub fn next_event(&mut self) -> Result<WatchEvent> {
        match server_answer(self.conn.recv()?)? {
            Value::Array(items)
                if items.len() == 7 && as_bytes(&items[0]).as_deref() == Some(b"firn.watch") =>
            {
                let key = as_bytes(&items[1]).ok_or_else(|| protocol(&items[1]))?;
                let info = VersionInfo {
                    version: as_u64(&items[2])?,
                    commit_ts: as_text(&items[3])?.parse().map_err(protocol)?,
                    event_time_us: if items[4] == Value::Nil {
                        None
                    } else {
                        Some(as_u64(&items[4])?)
                    },
                    deleted: as_bytes(&items[5]).as_deref() == Some(b"del"),
                    value: as_bytes(&items[6]),
                    blob: None,
                    kind: if as_bytes(&items[5]).as_deref() == Some(b"stream") {
                        firn_model::KeyKind::Stream
                    } else {
                        firn_model::KeyKind::String
                    },
                };
                Ok(WatchEvent { key, info })
            }
            v => Err(protocol(v)),
        }
    }
}

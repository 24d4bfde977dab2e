//! A connection that watches (`FIRN.WATCH`): committed versions streamed to it, and the few
//! commands it takes meanwhile (FIRN.UNWATCH, PING, QUIT), including those pipelined behind
//! the FIRN.WATCH itself.

use tokio::io::AsyncReadExt;

use super::Connection;
use super::cmd::firn_watch;
use super::reply::Reply;

impl Connection {
    /// Streams events until the client sends FIRN.UNWATCH or QUIT, the watch ends, or the
    /// node stops (then the connection closes).
    pub(super) async fn watch_loop(
        &mut self,
        stream: &mut crate::watch::WatchStream,
    ) -> std::io::Result<()> {
        // Commands pipelined behind FIRN.WATCH were read with it: they are answered first,
        // not left waiting for more bytes from the client.
        if self.watch_commands().await? {
            return Ok(());
        }
        loop {
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(e)) => {
                        firn_watch::event_reply(&e).encode(self.client.proto, &mut self.output);
                        self.flush().await?;
                    }
                    Some(Err(e)) => {
                        Reply::error(&e).encode(self.client.proto, &mut self.output);
                        self.flush().await?;
                        return Ok(());
                    }
                    None => return Ok(()),
                },
                _ = self.stop.changed() => {
                    self.client.closing = true;
                    return Ok(());
                }
                n = self.stream.read_buf(&mut self.input) => {
                    if n? == 0 {
                        self.client.closing = true;
                        return Ok(());
                    }
                    if self.watch_commands().await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Answers the commands read while watching; `true` once one ends the watch
    /// (FIRN.UNWATCH, QUIT), leaving the commands after it for the connection.
    async fn watch_commands(&mut self) -> std::io::Result<bool> {
        while let Some(frame) = self.next_frame() {
            let reply = match frame {
                Ok((name, _)) => match name.as_str() {
                    "FIRN.UNWATCH" => {
                        Reply::Ok.encode(self.client.proto, &mut self.output);
                        self.flush().await?;
                        return Ok(true);
                    }
                    "QUIT" => {
                        self.client.closing = true;
                        Reply::Ok.encode(self.client.proto, &mut self.output);
                        self.flush().await?;
                        return Ok(true);
                    }
                    "PING" => Reply::Simple("PONG".into()),
                    _ => Reply::Error(
                        "ERR only FIRN.UNWATCH, PING and QUIT are allowed while watching".into(),
                    ),
                },
                Err(r) => r,
            };
            reply.encode(self.client.proto, &mut self.output);
        }
        self.flush().await?;
        Ok(false)
    }
}

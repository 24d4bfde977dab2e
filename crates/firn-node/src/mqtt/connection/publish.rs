//! PUBLISH from the client: written through the core in the order sent, acknowledged once
//! committed (PUBACK at QoS 1; PUBREC, and PUBCOMP on PUBREL, at QoS 2), then delivered.

use bytes::Bytes;
use firn_model::{
    Access, FirnError, Key, KeyspaceMode, KvWrite, LogWrite, NewRecord, PutRequest, Request,
};
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::sync::oneshot;

use super::Connection;
use crate::mqtt::alias::AliasInvalid;
use crate::mqtt::queue;
use crate::mqtt::topic::check_topic;
use crate::mqtt::wire::{self, Closing, Level, Out, Reason};
use crate::mqtt::{MqttSettings, counted};
use crate::router::Router;
use crate::session::Started;

/// A PUBLISH whose write was started, in the order the client sent it.
pub(super) type Writing = std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>;

/// How a PUBLISH's write ended.
pub(super) struct Outcome {
    publish: wire::Publish,
    key: Key,
    /// Whether its write applied (its refusal may still come after: a queue it goes to
    /// refused it).
    applied: bool,
    result: Result<(), FirnError>,
}

impl Connection {
    /// The writes still in flight when the client left (a QoS 0 PUBLISH followed by
    /// DISCONNECT, say): each is still delivered once committed; only the answers to the
    /// client are lost with it.
    pub(super) async fn finish(
        &mut self,
        mut writes: FuturesOrdered<Writing>,
    ) -> Result<(), String> {
        while let Some(outcome) = writes.next().await {
            let _ = self.written(outcome).await;
        }
        Ok(())
    }

    /// Starts the write a PUBLISH stands for; it is acknowledged (and delivered) once
    /// committed, in the order sent.
    pub(super) async fn publish(
        &mut self,
        mut p: wire::Publish,
        topic_alias: Option<u16>,
        writes: &mut FuturesOrdered<Writing>,
    ) -> Result<(), String> {
        p.topic = match self
            .aliases
            .resolve(std::mem::take(&mut p.topic), topic_alias)
        {
            Ok(topic) => topic,
            Err(why) => return self.alias_invalid(why).await,
        };
        if p.qos == 2
            && let Some(packet_id) = p.packet_id
        {
            // Sent again before its PUBREL: written once already (or being written).
            if self.qos2_received.contains(&packet_id) {
                return self
                    .send(Out::PubRec {
                        packet_id,
                        refused: None,
                    })
                    .await;
            }
            if !self.qos2_writing.insert(packet_id) {
                return Ok(());
            }
        }
        let key = match check_topic(&p.topic)
            .map_err(FirnError::BadArgument)
            .and_then(|()| Key::new(Bytes::from(format!("{}{}", self.settings.prefix, p.topic))))
        {
            Ok(key) => key,
            Err(e) => return self.refuse(&p, Reason::TopicInvalid, e).await,
        };
        let request = match write_of(&self.router, &self.settings, &p, &key) {
            Ok(r) => r,
            Err(e) => return self.refuse(&p, reason_of(&e), e).await,
        };
        // A topic's messages, retained or not, are its key's: writing them takes `write`
        // on the key (not on the log they go to).
        if let Err(e) = self.session.authorize(&[Access::write_key(&key)]) {
            return self.refuse(&p, Reason::NotAuthorized, e).await;
        }
        // A persistent session's QoS 2 PUBLISH may be a second try of one written on an
        // earlier connection: written under the key its first try was.
        let once = match (self.persistent.as_mut(), p.qos, p.packet_id) {
            (Some(persistent), 2, Some(packet_id)) if request.is_some() => {
                match persistent.qos2.key_for(&self.router, packet_id).await {
                    Ok(once) => Some(once),
                    Err(e) => return self.refuse(&p, reason_of(&e), e).await,
                }
            }
            _ => None,
        };
        let started: Option<Started> = match request {
            Some(request) => {
                if let Some(once) = once {
                    self.session.with_once(once);
                }
                let started = self.session.submit(&self.router, request).await;
                self.session.without_once();
                Some(started)
            }
            // Only delivered.
            None => None,
        };
        let router = self.router.clone();
        let sessions = self.sessions.clone();
        let (enqueued, done) = oneshot::channel();
        let before = self.enqueued.replace(done);
        writes.push_back(Box::pin(async move {
            let mut written = match started {
                Some(started) => started.answer(&router, false).await.map(|_| ()),
                None => Ok(()),
            };
            let applied = written.is_ok();
            // In every persistent session's queue it matches before it is acknowledged,
            // after the message before it.
            if let Some(before) = before {
                let _ = before.await;
            }
            if written.is_ok() {
                let clients = sessions.matching(&p.topic);
                if !clients.is_empty() {
                    written = queue::enqueue(&router, &clients, &p.topic, &p.payload).await;
                }
            }
            let _ = enqueued.send(());
            Outcome {
                publish: p,
                key,
                applied,
                result: written,
            }
        }));
        counted("publish");
        Ok(())
    }

    /// A persistent session's QoS 2 PUBLISH whose write was refused (not one written and
    /// then refused by a queue: sent again, it is not written twice): its packet id is
    /// released, so that the client's next message with it (5.0: the refused PUBREC ends
    /// the exchange) or its try again (3.1.1, on its next connection) is not answered the
    /// refusal remembered under its key. An outcome unknown (`UNCERTAIN`) keeps its key in
    /// 3.1.1: the try again settles it once.
    async fn qos2_refused(&mut self, p: &wire::Publish, e: &FirnError) -> Result<(), String> {
        let (Some(persistent), 2, Some(packet_id)) = (self.persistent.as_mut(), p.qos, p.packet_id)
        else {
            return Ok(());
        };
        if self.level == Level::V3 && matches!(e, FirnError::Indeterminate(_)) {
            return Ok(());
        }
        persistent
            .qos2
            .release(&self.router, packet_id)
            .await
            .map_err(|e| format!("releasing refused QoS 2 packet id {packet_id}: {e}"))
    }

    /// A PUBLISH whose Topic Alias is a protocol error (5.0, 3.3.2.3.4): DISCONNECT `Topic
    /// Alias invalid`, and the connection closes; nothing of it is written.
    pub(super) async fn alias_invalid(&mut self, why: AliasInvalid) -> Result<(), String> {
        counted("topic_alias_invalid");
        self.send(Out::Disconnect(Closing::TopicAliasInvalid))
            .await?;
        Err(why.to_string())
    }

    /// A PUBLISH refused before anything was written: 5.0 says why in its PUBACK (a QoS 0
    /// one is dropped); 3.1.1 has no way to, so the connection closes, as it says to.
    async fn refuse(
        &mut self,
        p: &wire::Publish,
        reason: Reason,
        e: FirnError,
    ) -> Result<(), String> {
        counted("publish_refused");
        if p.qos == 2
            && let Some(packet_id) = p.packet_id
        {
            self.qos2_writing.remove(&packet_id);
        }
        match (self.level, p.packet_id) {
            (Level::V5, Some(packet_id)) if p.qos == 2 => {
                self.send(Out::PubRec {
                    packet_id,
                    refused: Some(reason),
                })
                .await
            }
            (Level::V5, Some(packet_id)) => {
                self.send(Out::PubAck {
                    packet_id,
                    refused: Some(reason),
                })
                .await
            }
            (Level::V5, None) => Ok(()),
            (Level::V3, _) => Err(format!("PUBLISH to '{}' refused: {e}", p.topic)),
        }
    }

    /// A PUBLISH whose write is over: committed, it is delivered to every subscriber of its
    /// channel (on every node) and acknowledged; refused, 5.0 says why and 3.1.1 closes the
    /// connection (the client sends it again on its next).
    pub(super) async fn written(&mut self, outcome: Outcome) -> Result<(), String> {
        let Outcome {
            publish: p,
            key,
            applied,
            result,
        } = outcome;
        if let Err(e) = result {
            if !applied {
                self.qos2_refused(&p, &e).await?;
            }
            return self.refuse(&p, reason_of(&e), e).await;
        }
        let _ = self
            .router
            .publisher()
            .publish(key.bytes().clone(), p.payload.clone())
            .await;
        match p.packet_id {
            Some(packet_id) if p.qos == 2 => {
                self.qos2_writing.remove(&packet_id);
                self.qos2_received.insert(packet_id);
                self.send(Out::PubRec {
                    packet_id,
                    refused: None,
                })
                .await?;
            }
            Some(packet_id) => {
                self.send(Out::PubAck {
                    packet_id,
                    refused: None,
                })
                .await?;
            }
            None => {}
        }
        Ok(())
    }
}

/// The write a PUBLISH stands for: a retained message is a version of its key (an
/// empty one deletes it); any other is a record of the log under its key's tag, unless
/// the key's keyspace stores nothing (`notify`: `None`, only delivered).
pub(super) fn write_of(
    router: &Router,
    settings: &MqttSettings,
    p: &wire::Publish,
    key: &Key,
) -> Result<Option<Request>, FirnError> {
    router.kernel().limits().check_value(p.payload.len())?;
    if p.retain {
        return Ok(Some(if p.payload.is_empty() {
            KvWrite::Delete {
                keys: vec![key.clone()],
            }
            .into()
        } else {
            KvWrite::Put(PutRequest::new(key.clone(), p.payload.clone())).into()
        }));
    }
    let layout = router.kernel().layout();
    let mode = layout.keyspaces.as_ref().and_then(|specs| {
        crate::cluster::layout::keyspace_among(specs, key.as_bytes()).map(|s| s.mode)
    });
    if mode == Some(KeyspaceMode::Notify) {
        return Ok(None);
    }
    Ok(Some(
        LogWrite::Append {
            log: settings.log.clone(),
            records: vec![NewRecord {
                tags: vec![key.clone()],
                payload: p.payload.clone(),
            }],
        }
        .into(),
    ))
}

/// How a refused write shows in a 5.0 PUBACK.
pub(super) fn reason_of(e: &FirnError) -> Reason {
    match e {
        FirnError::NoPerm { .. } | FirnError::NoAuth => Reason::NotAuthorized,
        FirnError::ValueTooLarge { .. } | FirnError::NoSpace(_) => Reason::QuotaExceeded,
        FirnError::KeyTooLarge { .. } | FirnError::BadArgument(_) => Reason::TopicInvalid,
        _ => Reason::Unspecified,
    }
}

//! A run's writes as one transaction: each [`Effect`] becomes a step of one
//! `KvWrite::Atomic` (across shards, the two-phase commit of "Transactions across shards"),
//! under the caller's compares — an `FCALL`'s reads still current, a trigger's cursor still
//! where its runner found it. Publishes go out after the commit: publish/subscribe keeps no
//! history to roll back.

use bytes::Bytes;
use firn_model::limits::{TXN_BYTES_MAX, TXN_STEPS_MAX};
use firn_model::log::encode_fields;
use firn_model::{
    Access, Compare, FirnError, Key, KeyChange, KvWrite, LogWrite, NewRecord, PutRequest, StreamId,
    TxnStep,
};

use super::Rights;
use super::sandbox::Effect;

/// The transaction steps of a run's writes, and what it publishes once they commit.
#[derive(Debug, Default)]
pub struct Writes {
    pub steps: Vec<TxnStep>,
    /// The keys' and values' bytes of the steps added.
    pub bytes: usize,
    pub publishes: Vec<(Bytes, Bytes)>,
}

impl Writes {
    /// Adds a run's effects, in the order it made them; each key written must be within
    /// `rights`.
    pub fn add(&mut self, effects: Vec<Effect>, rights: &Rights) -> Result<(), FirnError> {
        // All checked before any is added: a run's writes are kept whole or not at all.
        for k in effects.iter().filter_map(Effect::key) {
            rights.check(&[Access::write_key(&key(k.clone())?)])?;
        }
        for effect in effects {
            self.bytes += effect.bytes();
            let step = match effect {
                Effect::Put(k, v) => TxnStep::Write(KvWrite::Put(PutRequest::new(key(k)?, v))),
                Effect::Del(k) => TxnStep::Write(KvWrite::Delete {
                    keys: vec![key(k)?],
                }),
                Effect::Incr(k, by) => TxnStep::Write(KvWrite::Change {
                    key: key(k)?,
                    change: KeyChange::IncrBy(by),
                }),
                Effect::XAdd(stream, fields) => TxnStep::Log(LogWrite::StreamAdd {
                    key: key(stream)?,
                    id: StreamId::Auto,
                    payload: encode_fields(&fields),
                    trim: None,
                    no_create: false,
                }),
                Effect::Append(log, tags, payload) => TxnStep::Log(LogWrite::Append {
                    log: key(log)?,
                    records: vec![NewRecord {
                        tags: tags.into_iter().map(key).collect::<Result<_, _>>()?,
                        payload,
                    }],
                }),
                Effect::Publish(channel, message) => {
                    self.publishes.push((channel, message));
                    continue;
                }
            };
            self.steps.push(step);
        }
        Ok(())
    }

    /// Whether a run's `effects` fit beside these writes in a transaction that keeps half
    /// its bounds free (for the steps and bytes of what goes with them).
    pub fn has_room_for(&self, effects: &[Effect]) -> bool {
        let bytes: usize = effects.iter().map(Effect::bytes).sum();
        self.steps.len() + effects.len() <= TXN_STEPS_MAX / 2
            && self.bytes + bytes <= TXN_BYTES_MAX / 2
    }

    /// The transaction, under `compares`.
    pub fn atomic(&self, compares: Vec<Compare>) -> KvWrite {
        KvWrite::Atomic {
            compares,
            steps: self.steps.clone(),
            otherwise: None,
        }
    }
}

fn key(bytes: Bytes) -> Result<Key, FirnError> {
    Key::new(bytes.to_vec())
}

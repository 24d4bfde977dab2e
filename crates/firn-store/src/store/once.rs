//! Idempotent writes (`Op::Once`): the shard that applies a write with an idempotency key
//! remembers its answer, in its `System` table (so snapshots and restarts keep it), for a
//! window per producer — [`IDEM_WINDOW_US`] after it was applied and the newest
//! [`IDEM_PER_PRODUCER_MAX`] of the producer. The same key again within it applies nothing
//! and answers the remembered answer: after a leader change, after a restart, in the same
//! storage batch. An answer of `TRYAGAIN` is not remembered: nothing was applied.
//!
//! Rows: `idem/a/<producer><id>` → [`Remembered`]; `idem/t/<µs><producer><id>` orders them
//! by age, `idem/s/<producer><seq>` by arrival per producer, `idem/p/<producer>` counts a
//! producer's. (`<producer>` is its length in two bytes, then its bytes.) Each remembered
//! answer forgets at most a few expired ones, so the window is kept at the pace writes come.

use firn_model::limits::{IDEM_PER_PRODUCER_MAX, IDEM_WINDOW_US};
use firn_model::{FirnError, IdemKey, Response};
use serde::{Deserialize, Serialize};

use super::apply::Txn;
use crate::command::Op;
use crate::record::{decode, encode};

const ANSWERS: &[u8] = b"idem/a/";
const BY_AGE: &[u8] = b"idem/t/";
const BY_SEQ: &[u8] = b"idem/s/";
const PRODUCERS: &[u8] = b"idem/p/";
/// The last age row forgotten: the next forgetting starts after it.
const AGE_CURSOR: &[u8] = b"idem/cursor";

/// Most expired answers one write forgets.
const EXPIRED_DROPPED_PER_WRITE: usize = 4;

#[derive(Serialize, Deserialize)]
struct Remembered {
    at_us: u64,
    seq: u64,
    /// The fingerprint of the request it answered.
    request: u64,
    answer: Result<Response, FirnError>,
}

#[derive(Default, Serialize, Deserialize)]
struct ProducerMeta {
    next_seq: u64,
    count: u64,
}

fn producer_part(producer: &[u8]) -> Vec<u8> {
    let mut k = (producer.len() as u16).to_be_bytes().to_vec();
    k.extend_from_slice(producer);
    k
}

fn answer_row(key: &IdemKey) -> Vec<u8> {
    let mut k = ANSWERS.to_vec();
    k.extend(producer_part(&key.producer));
    k.extend_from_slice(&key.id);
    k
}

fn age_row(at_us: u64, key: &IdemKey) -> Vec<u8> {
    let mut k = BY_AGE.to_vec();
    k.extend_from_slice(&at_us.to_be_bytes());
    k.extend(producer_part(&key.producer));
    k.extend_from_slice(&key.id);
    k
}

fn seq_row(producer: &[u8], seq: u64) -> Vec<u8> {
    let mut k = BY_SEQ.to_vec();
    k.extend(producer_part(producer));
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn producer_row(producer: &[u8]) -> Vec<u8> {
    let mut k = PRODUCERS.to_vec();
    k.extend_from_slice(producer);
    k
}

/// The key a `producer part + id` suffix names.
fn key_of(suffix: &[u8]) -> Option<IdemKey> {
    let len = u16::from_be_bytes(suffix.get(..2)?.try_into().ok()?) as usize;
    let producer = suffix.get(2..2 + len)?;
    Some(IdemKey {
        producer: bytes::Bytes::copy_from_slice(producer),
        id: bytes::Bytes::copy_from_slice(suffix.get(2 + len..)?),
        request: 0,
    })
}

impl Txn<'_> {
    /// `op` under `key`: the remembered answer if there is one, else `op`'s, remembered.
    pub(super) fn once(&mut self, key: &IdemKey, op: &Op) -> Result<Response, FirnError> {
        if let Some(bytes) = self.system_get(&answer_row(key))? {
            let remembered: Remembered = decode(&bytes)?;
            if remembered.request != key.request {
                return Err(FirnError::BadArgument(format!(
                    "idempotency key '{}' of producer '{}' was used for another request; \
                     nothing was applied",
                    String::from_utf8_lossy(&key.id),
                    String::from_utf8_lossy(&key.producer)
                )));
            }
            return remembered.answer;
        }
        let mark = self.mark();
        let answer = self.run(op);
        match &answer {
            Err(FirnError::Internal(_) | FirnError::TryAgain(_) | FirnError::Busy(_)) => {
                return answer;
            }
            // A transaction's decision that it aborted applied nothing the client asked
            // for: not remembered, so that the transaction sent again may commit.
            Ok(Response::Decided {
                outcome: firn_model::TxnOutcome::Aborted,
                ..
            }) => return answer,
            Err(_) => {
                // Remembered, though the write is refused: what it queued goes.
                self.back_to(mark);
            }
            Ok(_) => {}
        }
        self.remember(key, &answer)?;
        answer
    }

    fn remember(
        &mut self,
        key: &IdemKey,
        answer: &Result<Response, FirnError>,
    ) -> Result<(), FirnError> {
        let at_us = self.ts.wall_us;
        let meta_row = producer_row(&key.producer);
        let mut meta = self.producer_meta(&meta_row)?;
        let seq = meta.next_seq;
        meta.next_seq += 1;
        meta.count += 1;
        let remembered = Remembered {
            at_us,
            seq,
            request: key.request,
            answer: answer.clone(),
        };
        self.system_put(answer_row(key), encode(&remembered));
        self.system_put(age_row(at_us, key), Vec::new());
        self.system_put(seq_row(&key.producer, seq), key.id.to_vec());
        if meta.count > IDEM_PER_PRODUCER_MAX {
            // The producer's oldest goes.
            let oldest = seq.saturating_sub(meta.count - 1);
            if let Some(id) = self.system_get(&seq_row(&key.producer, oldest))? {
                let old = IdemKey {
                    producer: key.producer.clone(),
                    id: id.into(),
                    request: 0,
                };
                self.forget(&old, Some(&mut meta))?;
            }
        }
        self.system_put(meta_row, encode(&meta));
        self.forget_expired(at_us.saturating_sub(IDEM_WINDOW_US))
    }

    /// A producer's count and next sequence number, as this batch leaves them.
    fn producer_meta(&self, meta_row: &[u8]) -> Result<ProducerMeta, FirnError> {
        Ok(self
            .system_get(meta_row)?
            .map(|b| decode(&b))
            .transpose()?
            .unwrap_or_default())
    }

    /// Forgets a few answers remembered before `before_us`.
    fn forget_expired(&mut self, before_us: u64) -> Result<(), FirnError> {
        for row in self.rows_after_cursor(BY_AGE, AGE_CURSOR, EXPIRED_DROPPED_PER_WRITE)? {
            let Some(at) = row.get(BY_AGE.len()..BY_AGE.len() + 8) else {
                continue;
            };
            let at_us = u64::from_be_bytes(at.try_into().unwrap_or([0xFF; 8]));
            if at_us >= before_us {
                break;
            }
            if let Some(key) = key_of(&row[BY_AGE.len() + 8..]) {
                self.forget(&key, None)?;
            }
            self.system_put(AGE_CURSOR.to_vec(), row);
        }
        Ok(())
    }

    /// Forgets `key`'s answer and its index rows; `meta`: its producer's, when the caller
    /// holds it (else it is read and written here).
    fn forget(&mut self, key: &IdemKey, meta: Option<&mut ProducerMeta>) -> Result<(), FirnError> {
        let row = answer_row(key);
        let Some(bytes) = self.system_get(&row)? else {
            return Ok(());
        };
        let remembered: Remembered = decode(&bytes)?;
        self.system_remove(row);
        self.system_remove(age_row(remembered.at_us, key));
        self.system_remove(seq_row(&key.producer, remembered.seq));
        match meta {
            Some(meta) => meta.count = meta.count.saturating_sub(1),
            None => {
                let meta_row = producer_row(&key.producer);
                let mut meta = self.producer_meta(&meta_row)?;
                meta.count = meta.count.saturating_sub(1);
                if meta.count == 0 {
                    self.system_remove(meta_row);
                } else {
                    self.system_put(meta_row, encode(&meta));
                }
            }
        }
        Ok(())
    }
}

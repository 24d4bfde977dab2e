//! A key's next value computed from its current one, inside apply (INCR and its kin,
//! INCRBYFLOAT, APPEND, GETDEL): it reads only the store and the command, so every replica
//! computes the same version. Errors are Redis's words.

use bytes::Bytes;
use firn_model::{
    FirnError, Key, KeyChange, KeyKind, KeyspaceMode, Lifetime, Response, WriteCondition,
};

use super::apply::Txn;
use crate::record::{KeyMeta, Stored};

impl Txn<'_> {
    pub(super) fn change(&mut self, key: &Key, change: &KeyChange) -> Result<Response, FirnError> {
        let k = key.as_bytes();
        let meta = self.meta(k)?;
        let current = match meta.live_kind() {
            None => None,
            Some(KeyKind::String) => Some(self.current_value(key, &meta)?),
            Some(_) => return Err(FirnError::WrongType),
        };
        let next = match change {
            KeyChange::IncrBy(by) => Some(incr_by(current.as_deref(), *by)?),
            KeyChange::IncrByFloat(by) => Some(incr_by_float(current.as_deref(), by)?),
            KeyChange::Append { suffix, max_len } => {
                let mut value = current.map(|c| c.to_vec()).unwrap_or_default();
                if (value.len() + suffix.len()) as u64 > *max_len {
                    return Err(FirnError::BadArgument(format!(
                        "string exceeds maximum allowed size ({max_len} bytes, --max-value-bytes)"
                    )));
                }
                value.extend_from_slice(suffix);
                Some(Bytes::from(value))
            }
            KeyChange::GetDel if current.is_none() => {
                // Nothing to delete: nothing written, as DEL of an absent key.
                return Ok(Response::Changed {
                    written: self.unwritten(key, &meta),
                    value: None,
                });
            }
            KeyChange::GetDel => None,
        };
        let stored = match &next {
            Some(v) => Stored::Inline(v.clone()),
            None => Stored::Tombstone,
        };
        let answers_previous = matches!(change, KeyChange::GetDel);
        let written = self.write_version(
            key,
            stored,
            None,
            WriteCondition::Always,
            answers_previous,
            Lifetime::Kept,
        )?;
        Ok(Response::Changed {
            written,
            value: next,
        })
    }

    /// The live string value of `key`, to change.
    fn current_value(&self, key: &Key, meta: &KeyMeta) -> Result<Bytes, FirnError> {
        let k = key.as_bytes();
        match self.record(k, meta.latest)?.map(|r| r.value) {
            Some(Stored::Inline(v)) => Ok(v),
            Some(Stored::Blob(_)) => Err(FirnError::BadArgument(
                "the value is a large value, kept beside the log; only a value of up to \
                 --max-value-bytes is changed in place"
                    .into(),
            )),
            _ if self.store.keyspace_mode(k) == KeyspaceMode::Notify => Err(FirnError::Refused(
                "the key is in a notify keyspace, which keeps no values to change".into(),
            )),
            _ => Err(FirnError::Internal(format!(
                "key '{key}' has no stored newest version"
            ))),
        }
    }
}

fn not_an_integer() -> FirnError {
    FirnError::BadArgument("value is not an integer or out of range".into())
}

fn incr_by(current: Option<&[u8]>, by: i64) -> Result<Bytes, FirnError> {
    let now = match current {
        None => 0,
        Some(text) => firn_model::redis_integer(text).ok_or_else(not_an_integer)?,
    };
    let next = now
        .checked_add(by)
        .ok_or_else(|| FirnError::BadArgument("increment or decrement would overflow".into()))?;
    Ok(Bytes::from(next.to_string()))
}

/// A decimal number as INCRBYFLOAT reads one: no surrounding space, not NaN.
fn redis_float(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.is_empty() || text.trim() != text {
        return None;
    }
    text.parse::<f64>().ok().filter(|f| !f.is_nan())
}

/// INCRBYFLOAT in 64-bit floats, written as the shortest decimal that reads back the same,
/// without an exponent (Redis computes in `long double` and prints 17 digits, trimmed: the
/// two agree but in the last digits of sums like 0.1 + 0.2).
fn incr_by_float(current: Option<&[u8]>, by: &str) -> Result<Bytes, FirnError> {
    let not_a_float = || FirnError::BadArgument("value is not a valid float".into());
    let now = match current {
        None => 0.0,
        Some(text) => redis_float(text).ok_or_else(not_a_float)?,
    };
    let by = redis_float(by.as_bytes()).ok_or_else(not_a_float)?;
    let next = now + by;
    if !next.is_finite() {
        return Err(FirnError::BadArgument(
            "increment would produce NaN or Infinity".into(),
        ));
    }
    // `-0` prints as `0`, as Redis prints it.
    let next = if next == 0.0 { 0.0 } else { next };
    Ok(Bytes::from(format!("{next}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increments_refuse_overflow_and_floats_print_plainly() {
        assert_eq!(incr_by(None, 5).unwrap(), "5");
        assert_eq!(incr_by(Some(b"-3"), 1).unwrap(), "-2");
        assert!(incr_by(Some(b"9223372036854775807"), 1).is_err());
        assert!(incr_by(Some(b"abc"), 1).is_err());
        assert_eq!(incr_by_float(Some(b"10.5"), "0.1").unwrap(), "10.6");
        assert_eq!(incr_by_float(None, "5.0e3").unwrap(), "5000");
        assert_eq!(incr_by_float(Some(b"3"), "-3").unwrap(), "0");
        assert_eq!(
            incr_by_float(Some(b"1"), "1e20").unwrap(),
            "100000000000000000000"
        );
        assert!(incr_by_float(Some(b"1"), "inf").is_err());
        assert!(incr_by_float(Some(b" 1"), "1").is_err());
        assert!(incr_by_float(Some(b"1"), "nan").is_err());
    }
}

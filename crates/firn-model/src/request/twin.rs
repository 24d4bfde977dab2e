//! Device twins (docs/architecture.md, "Device twins"): twin `N` is the keys `N/desired` and
//! `N/reported`, each a JSON object. A read gives both at one time and their delta; a patch
//! is a JSON merge patch of one of them.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::VersionInfo;
use super::access::Access;
use crate::error::FirnError;
use crate::hlc::CommitTs;
use crate::key::Key;

/// A request of the twin subsystem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TwinRequest {
    /// Both documents, read in one snapshot: at `at`, or without it at the newest time the
    /// keys' shards have closed after the caller's own writes. Answers [`Response::Twin`].
    ///
    /// [`Response::Twin`]: super::Response::Twin
    Get {
        twin: TwinName,
        at: Option<CommitTs>,
    },
    /// A JSON merge patch (RFC 7396) of one document, applied to its newest version.
    /// Answers `Response::Written` with the version it wrote.
    Patch {
        twin: TwinName,
        side: TwinSide,
        patch: Bytes,
    },
}

/// One of a twin's two documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TwinSide {
    /// What the backend wants the device to be.
    Desired,
    /// What the device says it is.
    Reported,
}

impl TwinSide {
    pub fn as_str(self) -> &'static str {
        match self {
            TwinSide::Desired => "desired",
            TwinSide::Reported => "reported",
        }
    }

    /// Which of a twin's documents `key` would hold (`…/desired`, `…/reported`), if any.
    pub fn of_key(key: &[u8]) -> Option<TwinSide> {
        [TwinSide::Desired, TwinSide::Reported]
            .into_iter()
            .find(|side| {
                key.strip_suffix(side.as_str().as_bytes())
                    .is_some_and(|name| name.ends_with(b"/") && name.len() > 1)
            })
    }
}

/// A twin's name: a key whose `/desired` and `/reported` keys fit the key limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinName(Key);

impl TwinName {
    pub fn new(name: impl Into<Bytes>) -> Result<Self, FirnError> {
        let name = Key::new(name)?;
        // The longer of the two keys must be a key too.
        Key::new([name.bytes().as_ref(), b"/reported"].concat()).map_err(|e| match e {
            FirnError::KeyTooLarge { len, max } => FirnError::BadArgument(format!(
                "twin name is {} bytes; with '/reported' it must fit a key ({max} bytes)",
                len - "/reported".len()
            )),
            other => other,
        })?;
        Ok(TwinName(name))
    }

    pub fn name(&self) -> &Key {
        &self.0
    }

    /// The key holding one of the twin's documents.
    pub fn key(&self, side: TwinSide) -> Key {
        let key = [self.0.bytes().as_ref(), b"/", side.as_str().as_bytes()].concat();
        Key::new(key).expect("checked when the name was made")
    }
}

impl TwinRequest {
    pub fn twin(&self) -> &TwinName {
        match self {
            TwinRequest::Get { twin, .. } | TwinRequest::Patch { twin, .. } => twin,
        }
    }

    pub fn is_write(&self) -> bool {
        matches!(self, TwinRequest::Patch { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            TwinRequest::Get { .. } => "twin_get",
            TwinRequest::Patch { .. } => "twin_patch",
        }
    }

    /// A read needs `read` on both keys; a patch reads and writes its own.
    pub fn access(&self) -> Vec<Access> {
        match self {
            TwinRequest::Get { twin, .. } => vec![
                Access::read_key(&twin.key(TwinSide::Desired)),
                Access::read_key(&twin.key(TwinSide::Reported)),
            ],
            TwinRequest::Patch { twin, side, .. } => {
                let key = twin.key(*side);
                vec![Access::read_key(&key), Access::write_key(&key)]
            }
        }
    }
}

/// A twin as one read saw it ([`TwinRequest::Get`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinState {
    /// The time both documents were read at.
    pub at: CommitTs,
    /// The newest version of `N/desired` at `at` (`None`: never written, or deleted).
    pub desired: Option<VersionInfo>,
    pub reported: Option<VersionInfo>,
    /// JSON: every member of `desired` that `reported` lacks or holds another value for,
    /// objects compared member by member; `{}` when none.
    pub delta: Bytes,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::KEY_BYTES_MAX;

    #[test]
    fn a_key_says_which_document_it_would_hold() {
        assert_eq!(TwinSide::of_key(b"pump/1/desired"), Some(TwinSide::Desired));
        assert_eq!(
            TwinSide::of_key(b"pump/1/reported"),
            Some(TwinSide::Reported)
        );
        for key in [
            &b"pump/1/undesired"[..],
            b"/reported",
            b"reported",
            b"pump/1",
        ] {
            assert_eq!(TwinSide::of_key(key), None, "{key:?}");
        }
    }

    #[test]
    fn a_twins_keys_are_its_name_and_a_side() {
        let twin = TwinName::new("devices/d1").unwrap();
        assert_eq!(
            twin.key(TwinSide::Desired).bytes().as_ref(),
            b"devices/d1/desired"
        );
        assert_eq!(
            twin.key(TwinSide::Reported).bytes().as_ref(),
            b"devices/d1/reported"
        );
    }

    #[test]
    fn a_name_too_long_for_its_reported_key_is_refused() {
        let fits = vec![b'a'; KEY_BYTES_MAX - "/reported".len()];
        assert!(TwinName::new(fits.clone()).is_ok());
        let err = TwinName::new([fits, vec![b'a']].concat()).unwrap_err();
        assert!(err.to_string().contains("twin name is"), "{err}");
        assert!(TwinName::new("").is_err());
    }
}

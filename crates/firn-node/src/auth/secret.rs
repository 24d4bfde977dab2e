//! A password or token as the users file stores it, and whether a presented secret is it.
//!
//! The file's form of choice is an argon2id PHC string (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`,
//! made by `firn hash-password`): salted, and slow on purpose, so that a stolen file costs a
//! guesser that much per guess. `sha256:` and the hex SHA-256 of the secret, and the secret
//! in plain text, are still read, for files written before: both are unsalted and fast to
//! guess, and the docs say so.

use argon2::{Algorithm, Argon2, Params, PasswordHash, PasswordHasher, PasswordVerifier, Version};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What `firn hash-password` makes: argon2id, version 0x13, 19 MiB of memory, 2 passes, one
/// lane, a 16-byte random salt and a 32-byte output — OWASP's recommended minimum for
/// argon2id, about 20–40 ms of one core per verification.
pub const ARGON2_MEMORY_KIB: u32 = 19 * 1024;
pub const ARGON2_PASSES: u32 = 2;
pub const ARGON2_LANES: u32 = 1;
const ARGON2_OUTPUT_BYTES: usize = 32;

/// The most a stored hash may ask of one verification: a hash past these would let the file
/// stall every sign-in (1 GiB of memory, 16 passes, 16 lanes).
const ARGON2_MEMORY_KIB_MAX: u32 = 1024 * 1024;
const ARGON2_PASSES_MAX: u32 = 16;
const ARGON2_LANES_MAX: u32 = 16;

pub enum StoredSecret {
    /// Boxed: a parsed PHC string is some 300 bytes, a SHA-256 32.
    Argon2(Box<PasswordHash>),
    /// The SHA-256 of the secret (from `sha256:` hex, or of the plain text the file held).
    Sha256([u8; 32]),
}

impl std::fmt::Debug for StoredSecret {
    /// The kind only: a hash in a log line is a hash handed to a guesser.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StoredSecret::Argon2(_) => "argon2",
            StoredSecret::Sha256(_) => "sha256",
        })
    }
}

fn sha256(secret: &[u8]) -> [u8; 32] {
    Sha256::digest(secret).into()
}

impl StoredSecret {
    /// A secret as the file gives it: an argon2 PHC string, `sha256:<64 hex digits>`, or the
    /// text itself.
    pub fn parse(given: &str) -> Result<Self, String> {
        if given.starts_with("$argon2") {
            return parse_argon2(given).map(|hash| StoredSecret::Argon2(Box::new(hash)));
        }
        match given.strip_prefix("sha256:") {
            Some(hex) => parse_hex(hex)
                .map(StoredSecret::Sha256)
                .ok_or_else(|| "a sha256: secret is 64 hex digits".into()),
            None if given.is_empty() => Err("an empty secret".into()),
            None => Ok(StoredSecret::Sha256(sha256(given.as_bytes()))),
        }
    }

    /// Whether `presented` is this secret. An argon2 secret costs one argon2 run (see
    /// [`super::verified`] for how often that is); a SHA-256 one is compared in constant
    /// time, as an early exit would tell a guesser how much of the hash its guess matches.
    pub fn matches(&self, presented: &[u8]) -> bool {
        match self {
            StoredSecret::Argon2(hash) => Argon2::default()
                .verify_password(presented, hash.as_ref())
                .is_ok(),
            StoredSecret::Sha256(hash) => bool::from(hash.ct_eq(&sha256(presented))),
        }
    }

    /// The SHA-256 of a fast secret, by which a bearer token is found without trying each
    /// user's; `None` for an argon2 one (salted: only trying it tells).
    pub fn sha256(&self) -> Option<[u8; 32]> {
        match self {
            StoredSecret::Sha256(hash) => Some(*hash),
            StoredSecret::Argon2(_) => None,
        }
    }

    pub fn is_argon2(&self) -> bool {
        matches!(self, StoredSecret::Argon2(_))
    }
}

/// SHA-256 of `secret`, for looking a presented token up among the fast ones.
pub fn sha256_of(secret: &[u8]) -> [u8; 32] {
    sha256(secret)
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn parse_argon2(given: &str) -> Result<PasswordHash, String> {
    let bad = |why: String| format!("not an argon2 hash as `firn hash-password` makes: {why}");
    let hash = PasswordHash::new(given).map_err(|e| bad(e.to_string()))?;
    Algorithm::try_from(hash.algorithm.as_str()).map_err(|e| bad(e.to_string()))?;
    if hash.salt.is_none() || hash.hash.is_none() {
        return Err(bad("it has no salt or no hash".into()));
    }
    let params = Params::try_from(&hash).map_err(|e| bad(e.to_string()))?;
    if params.m_cost() > ARGON2_MEMORY_KIB_MAX
        || params.t_cost() > ARGON2_PASSES_MAX
        || params.p_cost() > ARGON2_LANES_MAX
    {
        return Err(format!(
            "an argon2 hash asks m={} KiB, t={}, p={}; the most is m={ARGON2_MEMORY_KIB_MAX}, \
             t={ARGON2_PASSES_MAX}, p={ARGON2_LANES_MAX}",
            params.m_cost(),
            params.t_cost(),
            params.p_cost()
        ));
    }
    Ok(hash)
}

/// `secret` as an argon2id PHC string with a new random salt, for the users file.
pub fn hash_secret(secret: &[u8]) -> Result<String, String> {
    if secret.is_empty() {
        return Err("an empty secret".into());
    }
    let params = Params::new(
        ARGON2_MEMORY_KIB,
        ARGON2_PASSES,
        ARGON2_LANES,
        Some(ARGON2_OUTPUT_BYTES),
    )
    .map_err(|e| e.to_string())?;
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password(secret)
        .map(|hash| hash.to_string())
        .map_err(|e| format!("hashing: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_hash_is_salted_argon2id_and_matches_only_its_secret() {
        let hash = hash_secret(b"wonderland").unwrap();
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert_ne!(
            hash,
            hash_secret(b"wonderland").unwrap(),
            "a new salt each time"
        );
        let stored = StoredSecret::parse(&hash).unwrap();
        assert!(stored.is_argon2());
        assert!(stored.matches(b"wonderland"));
        assert!(!stored.matches(b"Wonderland"));
        assert!(!stored.matches(b""));
    }

    #[test]
    fn the_old_forms_are_still_read() {
        let hex = "sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";
        let stored = StoredSecret::parse(hex).unwrap();
        assert!(stored.matches(b"password") && !stored.matches(b"passwore"));
        let plain = StoredSecret::parse("hunter2").unwrap();
        assert!(plain.matches(b"hunter2") && !plain.matches(b"hunter3"));
    }

    #[test]
    fn a_bad_or_too_costly_hash_is_refused_with_why() {
        for (given, why) in [
            ("sha256:12", "64 hex digits"),
            ("", "an empty secret"),
            (
                "$argon2id$v=19$m=19456,t=2,p=1$nosalt",
                "not an argon2 hash",
            ),
            (
                "$argon2id$v=19$m=4194304,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$\
                 YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY",
                "the most is m=1048576",
            ),
        ] {
            let err = StoredSecret::parse(given).unwrap_err();
            assert!(err.contains(why), "{given:?}: {err}");
        }
    }
}

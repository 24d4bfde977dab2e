//! Secrets already verified against an argon2 hash, so that argon2 runs once per secret and
//! node rather than once per request: an HTTP bearer token is checked on every request, and
//! at 20–40 ms of a core each, argon2 would cap a node at a few dozen requests a second.
//!
//! An entry is keyed by a SHA-256 of the presented secret (and, for a password, the user's
//! name) under a key drawn at random when the node starts, so that the cache holds nothing
//! a guesser could test guesses against offline. Only successes are kept: a wrong secret
//! costs its argon2 run every time, which is what makes guessing slow. The users file is read
//! once at start, so an entry never goes stale. Bounded: past [`VERIFIED_SECRETS_MAX`]
//! entries one is dropped for each one added (it is verified again the next time).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::User;

/// Most secrets kept verified: one per token or password in use, far more than a node's
/// users and clients hold; 32 bytes of key and a pointer each.
pub const VERIFIED_SECRETS_MAX: usize = 4_096;

/// What a secret was presented as: a password names its user, a token does not.
#[derive(Clone, Copy)]
pub enum Presented<'a> {
    Password { user: &'a [u8] },
    Token,
}

pub struct VerifiedSecrets {
    key: [u8; 32],
    seen: Mutex<HashMap<[u8; 32], Arc<User>>>,
}

impl std::fmt::Debug for VerifiedSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifiedSecrets({} kept)", self.len())
    }
}

impl Default for VerifiedSecrets {
    fn default() -> Self {
        let mut key = [0u8; 32];
        // Without the OS's randomness the key is a constant: the cache still works and
        // holds unsalted hashes, as the old `sha256:` form did.
        if let Err(e) = getrandom::fill(&mut key) {
            tracing::warn!("no random key for the verified-secret cache: {e}");
        }
        VerifiedSecrets {
            key,
            seen: Mutex::new(HashMap::new()),
        }
    }
}

impl VerifiedSecrets {
    fn fingerprint(&self, as_: Presented<'_>, secret: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.key);
        match as_ {
            // The name's length first, so that no (name, password) pair reads as another.
            Presented::Password { user } => {
                h.update([0u8]);
                h.update((user.len() as u64).to_le_bytes());
                h.update(user);
            }
            Presented::Token => h.update([1u8]),
        }
        h.update(secret);
        h.finalize().into()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<User>>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The user `secret` was verified for before, if it was.
    pub fn get(&self, as_: Presented<'_>, secret: &[u8]) -> Option<Arc<User>> {
        let fingerprint = self.fingerprint(as_, secret);
        self.lock().get(&fingerprint).cloned()
    }

    /// Remembers that `secret` verified as `user`'s.
    pub fn insert(&self, as_: Presented<'_>, secret: &[u8], user: Arc<User>) {
        let fingerprint = self.fingerprint(as_, secret);
        let mut seen = self.lock();
        if seen.len() >= VERIFIED_SECRETS_MAX
            && !seen.contains_key(&fingerprint)
            && let Some(evicted) = seen.keys().next().copied()
        {
            seen.remove(&evicted);
        }
        seen.insert(fingerprint, user);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Argon2 runs one at a time on a node. A wrong secret costs a run every time (a wrong
/// bearer token one for each argon2 token of the users file), and anyone who reaches a port
/// may send them: a flood of them then takes one core, whatever the clients send, and the
/// node's other cores go on serving the clients already signed in.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs an argon2 verification, one at a time (see [`ONE_AT_A_TIME`]), without holding up
/// the other tasks of the runtime's worker it runs on (tens of milliseconds, and the wait
/// for the one before): on a multi-threaded runtime the worker's tasks move to another
/// thread meanwhile. The callers are synchronous (a sign-in, a request's header), so the work
/// cannot be awaited on a blocking thread instead.
pub fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let one = || {
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        f()
    };
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(one)
        }
        _ => one(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verification waits while another runs.
    #[test]
    fn verifications_run_one_at_a_time() {
        let running = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let next = std::thread::spawn(|| off_the_runtime(|| 7));
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!next.is_finished(), "a verification ran beside another");
        drop(running);
        assert_eq!(next.join().unwrap(), 7);
    }

    fn user(name: &str) -> Arc<User> {
        Arc::new(User {
            name: name.into(),
            password: None,
            grants: Vec::new(),
        })
    }

    #[test]
    fn a_password_is_kept_for_its_user_only_and_a_token_apart() {
        let cache = VerifiedSecrets::default();
        let alice = Presented::Password { user: b"alice" };
        cache.insert(alice, b"wonderland", user("alice"));
        assert_eq!(cache.get(alice, b"wonderland").unwrap().name(), "alice");
        assert!(
            cache
                .get(Presented::Password { user: b"bob" }, b"wonderland")
                .is_none()
        );
        assert!(cache.get(Presented::Token, b"wonderland").is_none());
        assert!(cache.get(alice, b"wonderlan").is_none());
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = VerifiedSecrets::default();
        for i in 0..VERIFIED_SECRETS_MAX + 10 {
            cache.insert(Presented::Token, i.to_string().as_bytes(), user("u"));
        }
        assert_eq!(cache.len(), VERIFIED_SECRETS_MAX);
        let newest = (VERIFIED_SECRETS_MAX + 9).to_string();
        assert!(cache.get(Presented::Token, newest.as_bytes()).is_some());
    }
}

//! Users and what they may do: a users file (`firn serve --users PATH`) names each user with
//! a password (RESP `AUTH`, `HELLO … AUTH`), bearer tokens (HTTP `Authorization: Bearer`),
//! and the key prefixes they may read, write and administer. Without a users file nothing is
//! checked (Redis's default user with no password). With one, a session acts for the user it
//! authenticated as ([`Principal`]), and every request is checked against what it touches
//! ([`firn_model::Access`], the same list for both front ends) before it runs.
//!
//! ```toml
//! [users.alice]
//! password = "$argon2id$v=19$m=19456,t=2,p=1$…"   # firn hash-password
//! tokens = ["$argon2id$v=19$…"]  # HTTP bearer tokens
//! read = ["sensor/", "cfg:"]     # key prefixes ("" is every key)
//! write = ["sensor/"]
//! admin = []
//! ```
//!
//! Secrets are argon2 PHC strings (`firn hash-password`, [`hash_secret`]); `sha256:` and the
//! hex SHA-256 of the secret, or the secret itself as plain text, are still read (see
//! [`secret`]). An argon2 secret is verified once per node and secret, then remembered
//! ([`verified`]): a bearer token is checked on every HTTP request.

mod secret;
mod verified;

pub use secret::{ARGON2_LANES, ARGON2_MEMORY_KIB, ARGON2_PASSES, hash_secret};
pub use verified::VERIFIED_SECRETS_MAX;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use firn_model::{Access, FirnError, Permission};

use secret::StoredSecret;
use verified::{Presented, VerifiedSecrets, off_the_runtime};

/// Every user a node knows, by name and by bearer token.
#[derive(Debug, Default)]
pub struct Users {
    by_name: BTreeMap<String, Arc<User>>,
    /// SHA-256 of a fast (`sha256:` or plain) bearer token → its user.
    by_token: HashMap<[u8; 32], Arc<User>>,
    /// The argon2 tokens and their users: salted, so found only by trying each.
    argon2_tokens: Vec<(StoredSecret, Arc<User>)>,
    verified: VerifiedSecrets,
}

#[derive(Debug)]
pub struct User {
    name: String,
    /// None: the user signs in with tokens only.
    password: Option<StoredSecret>,
    grants: Vec<(Permission, Bytes)>,
}

/// Who a session acts for.
#[derive(Clone, Debug, Default)]
pub enum Principal {
    /// No users file: nothing is checked.
    #[default]
    Open,
    /// Users are configured and the session has not authenticated.
    Anonymous,
    User(Arc<User>),
}

impl Principal {
    /// A new session's principal on a node with `users`.
    pub fn unauthenticated(users: Option<&Users>) -> Self {
        if users.is_some() {
            Principal::Anonymous
        } else {
            Principal::Open
        }
    }

    /// Whether the session may make a request that needs `needs`: `NOAUTH` before it has
    /// authenticated, `NOPERM` naming the first permission it lacks.
    pub fn authorize(&self, needs: &[Access]) -> Result<(), FirnError> {
        refuse_own_keys(needs)?;
        match self {
            Principal::Open => Ok(()),
            Principal::Anonymous => Err(FirnError::NoAuth),
            Principal::User(user) => user.authorize(needs),
        }
    }

    /// The user a request acts for, when users are checked.
    pub fn user_name(&self) -> Option<&str> {
        match self {
            Principal::User(user) => Some(&user.name),
            _ => None,
        }
    }

    /// What `ACL WHOAMI` answers: the user, or `default` when nothing is checked.
    pub fn name(&self) -> Result<&str, FirnError> {
        match self {
            Principal::Open => Ok("default"),
            Principal::Anonymous => Err(FirnError::NoAuth),
            Principal::User(user) => Ok(&user.name),
        }
    }
}

/// Keys under `_firn/` are Firn's own (functions, triggers, timers and their cursors): a
/// client reads them but writes them only through `FIRN.FUNCTION`, `FIRN.TRIGGER` and
/// `FIRN.TIMER`, whatever its rights.
fn refuse_own_keys(needs: &[Access]) -> Result<(), FirnError> {
    const OWN: &[u8] = firn_model::function::RESERVED_PREFIX;
    let own = needs.iter().any(|need| {
        need.permission == Permission::Write
            && match &need.scope {
                firn_model::Scope::Key(k) => k.starts_with(OWN),
                firn_model::Scope::Prefix(p) => p.starts_with(OWN),
            }
    });
    if own {
        return Err(FirnError::Refused(
            "keys under _firn/ are kept by Firn (functions, triggers, timers); use FIRN.FUNCTION, FIRN.TRIGGER or FIRN.TIMER".into(),
        ));
    }
    Ok(())
}

impl User {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn authorize(&self, needs: &[Access]) -> Result<(), FirnError> {
        for need in needs {
            let granted = self
                .grants
                .iter()
                .any(|(p, prefix)| *p == need.permission && need.scope.within(prefix));
            if !granted {
                return Err(FirnError::NoPerm {
                    user: self.name.clone(),
                    permission: need.permission.as_str().into(),
                    scope: need.scope.describe(),
                });
            }
        }
        Ok(())
    }
}

impl Users {
    /// Reads a users file; every problem names the file and the user.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
        let mut users = Users::default();
        for (key, _) in doc.iter() {
            if key != "users" {
                return Err(format!(
                    "unknown table or key `{key}`: users are under [users.NAME]"
                ));
            }
        }
        let Some(table) = doc.get("users").and_then(|t| t.as_table_like()) else {
            return Err("no [users.NAME] table".into());
        };
        for (name, item) in table.iter() {
            let user = Arc::new(parse_user(name, item).map_err(|e| format!("user `{name}`: {e}"))?);
            for token in user_tokens(name, item)? {
                match token.sha256() {
                    Some(hash) => {
                        if users.by_token.insert(hash, user.clone()).is_some() {
                            return Err(format!("user `{name}`: a token another user has"));
                        }
                    }
                    None => users.argon2_tokens.push((token, user.clone())),
                }
            }
            users.by_name.insert(name.to_string(), user);
        }
        if users.by_name.is_empty() {
            return Err("no users".into());
        }
        Ok(users)
    }

    /// `AUTH name password`: the user, or `WRONGPASS`.
    pub fn login(&self, name: &[u8], password: &[u8]) -> Result<Arc<User>, FirnError> {
        let user = std::str::from_utf8(name)
            .ok()
            .and_then(|n| self.by_name.get(n))
            .ok_or(FirnError::WrongPass)?;
        let Some(secret) = &user.password else {
            return Err(FirnError::WrongPass);
        };
        if !secret.is_argon2() {
            return secret
                .matches(password)
                .then(|| user.clone())
                .ok_or(FirnError::WrongPass);
        }
        let presented = Presented::Password {
            user: user.name.as_bytes(),
        };
        if let Some(known) = self.verified.get(presented, password) {
            return Ok(known);
        }
        if !off_the_runtime(|| secret.matches(password)) {
            return Err(FirnError::WrongPass);
        }
        self.verified.insert(presented, password, user.clone());
        Ok(user.clone())
    }

    /// The user of that name.
    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.by_name.get(name).cloned()
    }

    /// An HTTP bearer token's user, or `WRONGPASS`. A token not seen before is tried
    /// against each argon2 token of the file (one argon2 run each), then remembered.
    pub fn bearer(&self, token: &str) -> Result<Arc<User>, FirnError> {
        let token = token.as_bytes();
        if let Some(user) = self.by_token.get(&secret::sha256_of(token)) {
            return Ok(user.clone());
        }
        if self.argon2_tokens.is_empty() {
            return Err(FirnError::WrongPass);
        }
        if let Some(user) = self.verified.get(Presented::Token, token) {
            return Ok(user);
        }
        let found = off_the_runtime(|| {
            self.argon2_tokens
                .iter()
                .find(|(secret, _)| secret.matches(token))
                .map(|(_, user)| user.clone())
        })
        .ok_or(FirnError::WrongPass)?;
        self.verified.insert(Presented::Token, token, found.clone());
        Ok(found)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

fn strings(item: &toml_edit::Item, what: &str) -> Result<Vec<String>, String> {
    let array = item
        .as_array()
        .ok_or_else(|| format!("`{what}` is a list of strings"))?;
    array
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("`{what}` is a list of strings"))
        })
        .collect()
}

fn parse_user(name: &str, item: &toml_edit::Item) -> Result<User, String> {
    if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
        return Err("a user name is not empty and has no spaces".into());
    }
    let table = item
        .as_table_like()
        .ok_or("a user is a table: [users.NAME]")?;
    let mut user = User {
        name: name.to_string(),
        password: None,
        grants: Vec::new(),
    };
    for (key, value) in table.iter() {
        match key {
            "password" => {
                let given = value.as_str().ok_or("`password` is a string")?;
                user.password =
                    Some(StoredSecret::parse(given).map_err(|e| format!("password: {e}"))?);
            }
            "tokens" => {}
            "read" | "write" | "admin" => {
                let permission = match key {
                    "read" => Permission::Read,
                    "write" => Permission::Write,
                    _ => Permission::Admin,
                };
                for prefix in strings(value, key)? {
                    user.grants.push((permission, Bytes::from(prefix)));
                }
            }
            other => {
                return Err(format!(
                    "unknown key `{other}`: a user has password, tokens, read, write, admin"
                ));
            }
        }
    }
    if user.password.is_none() && table.get("tokens").is_none() {
        return Err("neither a password nor tokens: the user could never sign in".into());
    }
    Ok(user)
}

fn user_tokens(name: &str, item: &toml_edit::Item) -> Result<Vec<StoredSecret>, String> {
    let Some(tokens) = item.as_table_like().and_then(|t| t.get("tokens")) else {
        return Ok(Vec::new());
    };
    strings(tokens, "tokens")
        .and_then(|ts| {
            ts.iter()
                .map(|t| StoredSecret::parse(t).map_err(|e| format!("tokens: {e}")))
                .collect()
        })
        .map_err(|e| format!("user `{name}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use firn_model::Scope;

    const FILE: &str = r#"
[users.alice]
password = "sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
tokens = ["t0ken"]
read = ["sensor/", "cfg:"]
write = ["sensor/"]

[users.ops]
password = "hunter2"
admin = [""]
"#;

    #[test]
    fn users_sign_in_with_their_secrets_only() {
        let users = Users::parse(FILE).unwrap();
        assert_eq!(users.login(b"alice", b"password").unwrap().name(), "alice");
        assert_eq!(
            users.login(b"alice", b"Password").unwrap_err(),
            FirnError::WrongPass
        );
        assert_eq!(
            users.login(b"bob", b"password").unwrap_err(),
            FirnError::WrongPass
        );
        assert_eq!(users.login(b"ops", b"hunter2").unwrap().name(), "ops");
        assert_eq!(users.bearer("t0ken").unwrap().name(), "alice");
        assert_eq!(users.bearer("t0ken ").unwrap_err(), FirnError::WrongPass);
    }

    #[test]
    fn a_user_reaches_only_its_prefixes_with_the_permission_given() {
        let users = Users::parse(FILE).unwrap();
        let alice = Principal::User(users.login(b"alice", b"password").unwrap());
        let key = |k: &str| Scope::Key(Bytes::from(k.to_string()));
        assert!(alice.authorize(&[Access::read(key("cfg:mode"))]).is_ok());
        assert!(alice.authorize(&[Access::write(key("sensor/1"))]).is_ok());
        let refused = alice
            .authorize(&[Access::write(key("cfg:mode"))])
            .unwrap_err();
        assert_eq!(refused.resp_code(), "NOPERM");
        assert!(
            refused
                .to_string()
                .contains("no write permission on the key 'cfg:mode'")
        );
        // A prefix wider than the grant is refused, a narrower one allowed.
        assert!(
            alice
                .authorize(&[Access::read(Scope::Prefix("sens".into()))])
                .is_err()
        );
        assert!(
            alice
                .authorize(&[Access::read(Scope::Prefix("sensor/a".into()))])
                .is_ok()
        );
        assert!(
            alice
                .authorize(&[Access::admin(Scope::Prefix("sensor/".into()))])
                .is_err()
        );
        assert_eq!(
            Principal::Anonymous.authorize(&[]).unwrap_err(),
            FirnError::NoAuth
        );
        assert!(
            Principal::Open
                .authorize(&[Access::admin(Scope::everything())])
                .is_ok()
        );
    }

    #[test]
    fn argon2_secrets_sign_in_once_verified_and_remembered() {
        let file = format!(
            "[users.carol]\npassword = \"{}\"\ntokens = [\"{}\"]\nread = [\"\"]\n",
            hash_secret(b"s3cret").unwrap(),
            hash_secret(b"carol-token").unwrap()
        );
        let users = Users::parse(&file).unwrap();
        assert_eq!(
            users.login(b"carol", b"s3cret!").unwrap_err(),
            FirnError::WrongPass
        );
        assert_eq!(
            users.bearer("carol-tokens").unwrap_err(),
            FirnError::WrongPass
        );
        assert_eq!(users.verified.len(), 0, "failures are not remembered");
        assert_eq!(users.login(b"carol", b"s3cret").unwrap().name(), "carol");
        assert_eq!(users.bearer("carol-token").unwrap().name(), "carol");
        assert_eq!(users.verified.len(), 2);
        // Remembered: a thousand more requests cost what a few argon2 runs would (each
        // takes tens of milliseconds).
        let began = std::time::Instant::now();
        for _ in 0..1_000 {
            assert_eq!(users.bearer("carol-token").unwrap().name(), "carol");
        }
        assert!(
            began.elapsed() < std::time::Duration::from_millis(500),
            "{:?}",
            began.elapsed()
        );
    }

    #[test]
    fn a_bad_users_file_is_refused_with_what_is_wrong() {
        for (text, why) in [
            ("", "no [users.NAME]"),
            (
                "[users.a]\nread = [\"x\"]\n",
                "neither a password nor tokens",
            ),
            (
                "[users.a]\npassword = \"p\"\nreed = []\n",
                "unknown key `reed`",
            ),
            ("[users.a]\npassword = \"sha256:12\"\n", "64 hex digits"),
            (
                "[users.a]\npassword = \"$argon2id$v=19$m=19456,t=2,p=1$bad\"\n",
                "not an argon2 hash",
            ),
            (
                "[users.a]\npassword = \"p\"\nread = \"x\"\n",
                "list of strings",
            ),
            (
                "[user.a]\npassword = \"p\"\n",
                "unknown table or key `user`",
            ),
            (
                "[users.a]\ntokens = [\"t\"]\n[users.b]\ntokens = [\"t\"]\n",
                "a token another user has",
            ),
        ] {
            let err = Users::parse(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }
}

//! A RESP connection's client: what the connection-local commands (HELLO, AUTH, ACL WHOAMI,
//! CLIENT, FIRN.AFTER, FIRN.TOKEN, QUIT) act on — its id, its protocol, its session and
//! whether it is closing. Each of those commands applies itself to it
//! ([`super::command::Action::Client`]), from its own file; the connection only hands it over.

use std::sync::Arc;

use bytes::Bytes;
use firn_model::FirnError;

use super::Shared;
use crate::auth::Principal;
use crate::session::Session;

pub struct Client {
    pub id: u64,
    /// The protocol its answers are written in (2 or 3).
    pub proto: u8,
    /// Its causality token (what it sends comes after what it was shown or given: reads see
    /// at least what it saw, writes are stamped above it), its name and whom it acts for.
    pub session: Session,
    /// Set by QUIT: the connection ends once the answers before it are written.
    pub closing: bool,
    shared: Arc<Shared>,
}

impl Client {
    /// A new connection's client: protocol 2, not signed in.
    pub(super) fn new(id: u64, shared: Arc<Shared>) -> Self {
        // RESP answers whole values: large ones are read into the answer.
        let mut session = Session::answering_whole_values();
        session.set_principal(Principal::unauthenticated(shared.router.kernel().users()));
        Client {
            id,
            proto: 2,
            session,
            closing: false,
            shared,
        }
    }

    /// Signs in as `user` (none: `default`). On a node without users, as on Redis without a
    /// password: the default user takes any password, a password alone is an error (the
    /// client believes in no sign-in that did not happen), and no other user exists.
    pub fn sign_in(&mut self, user: Option<Bytes>, password: &[u8]) -> Result<(), FirnError> {
        let Some(users) = self.shared.router.kernel().users() else {
            return match user.as_deref() {
                None => Err(FirnError::BadArgument(
                    "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".into(),
                )),
                Some(b"default") => Ok(()),
                Some(_) => Err(FirnError::WrongPass),
            };
        };
        let name = user.unwrap_or_else(|| Bytes::from_static(b"default"));
        match users.login(&name, password) {
            Ok(user) => {
                self.session.set_principal(Principal::User(user));
                Ok(())
            }
            Err(e) => {
                metrics::counter!("firn_auth_failures_total", "front" => "resp").increment(1);
                Err(e)
            }
        }
    }
}

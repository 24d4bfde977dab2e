//! Signing in and being let through on a RESP connection: `AUTH`, `HELLO … AUTH` and
//! `ACL WHOAMI`, and the check every command passes before it runs (see `crate::auth`).
//! Before a connection has signed in on a node with users, only AUTH, HELLO with AUTH and
//! QUIT are answered; everything else is `NOAUTH`.

use bytes::Bytes;
use firn_model::{Access, FirnError, Scope};

use super::Connection;
use super::command::Action;
use crate::auth::Principal;

/// What the command's action touches, as permissions check it.
fn needs(action: &Action) -> Result<Vec<Access>, FirnError> {
    Ok(match action {
        Action::Execute(request, _) => request.access(),
        Action::Watch(request) => request.access(),
        Action::RedisScan(scan) => scan.access(),
        Action::PubSub(pubsub) => pubsub.access(),
        Action::Service(service) => service.access()?,
        Action::ClusterRemove(_) => vec![Access::admin(Scope::everything())],
        _ => Vec::new(),
    })
}

impl Connection {
    /// Whether this connection may run `action` now.
    pub(super) fn allowed(&self, action: &Action) -> Result<(), FirnError> {
        match action {
            Action::Auth { .. } | Action::Quit | Action::Hello { auth: Some(_), .. } => Ok(()),
            action => self.session.authorize(&needs(action)?),
        }
    }

    /// Signs in as `user` (none: `default`); on a node without users any credentials are
    /// accepted, as before there were users.
    pub(super) fn sign_in(
        &mut self,
        user: Option<Bytes>,
        password: &[u8],
    ) -> Result<(), FirnError> {
        let Some(users) = self.shared.router.kernel().users() else {
            return Ok(());
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

    /// `ACL WHOAMI`.
    pub(super) fn whoami(&self) -> Result<String, FirnError> {
        self.session.principal().name().map(str::to_string)
    }
}

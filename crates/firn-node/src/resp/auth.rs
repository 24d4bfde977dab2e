//! Being let through on a RESP connection: the check every command passes before it runs
//! (see `crate::auth`; signing in is the client's, `client.rs`).
//! Before a connection has signed in on a node with users, only AUTH, HELLO with AUTH and
//! QUIT are answered; everything else is `NOAUTH`.

use firn_model::{Access, FirnError, Scope};

use super::Connection;
use super::command::Action;

/// What the command's action touches, as permissions check it.
fn needs(action: &Action) -> Result<Vec<Access>, FirnError> {
    Ok(match action {
        Action::Execute(request, _) => request.access(),
        Action::Watch(request) => request.access(),
        Action::RedisScan(scan) => scan.access(),
        Action::PubSub(pubsub) => pubsub.access(),
        Action::Service(service) => service.access()?,
        Action::ClusterRemove(_) => vec![Access::admin(Scope::everything())],
        Action::Once(_, action) => needs(action)?,
        _ => Vec::new(),
    })
}

impl Connection {
    /// Whether this connection may run `action` now.
    pub(super) fn allowed(&self, action: &Action) -> Result<(), FirnError> {
        match action {
            Action::Client(command) if command.before_sign_in() => Ok(()),
            action => self.client.session.authorize(&needs(action)?),
        }
    }
}

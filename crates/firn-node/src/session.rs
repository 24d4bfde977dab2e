//! A client's session, the same for both front ends: its causality token (the newest stamp
//! it was shown or given; what it sends comes after it) and its name. A RESP connection is
//! one session; over HTTP, each request is one, carried in by `Firn-After` and out by
//! `Firn-Token`. (Room for the principal and subscriptions.)

use bytes::Bytes;
use firn_model::{Answer, CallContext, CommitTs, FirnError, Request};

use crate::router::{Pending, Router};

#[derive(Clone, Debug, Default)]
pub struct Session {
    token: Option<CommitTs>,
    name: Option<Bytes>,
}

impl Session {
    /// A session that comes after `token`.
    pub fn after(token: Option<CommitTs>) -> Self {
        Session { token, name: None }
    }

    /// The causality token: the newest stamp this session has seen.
    pub fn token(&self) -> Option<CommitTs> {
        self.token
    }

    /// What this session sends from now on comes after `t` (and after what it saw).
    pub fn advance(&mut self, t: CommitTs) {
        self.token = self.token.max(Some(t));
    }

    pub fn name(&self) -> Option<&Bytes> {
        self.name.as_ref()
    }

    /// Names the session (an empty name clears it).
    pub fn set_name(&mut self, name: Bytes) {
        self.name = Some(name).filter(|n| !n.is_empty());
    }

    /// The context of the session's next call.
    pub fn context(&self) -> CallContext {
        CallContext::after(self.token)
    }

    /// Takes an answer in: the token rises to everything it showed (for a read, the newest
    /// version it looked at, tombstones included).
    pub fn saw(&mut self, answer: Answer) -> Answer {
        self.token = self.token.max(answer.newest_stamp());
        answer
    }

    /// Takes an outcome in (an error shows nothing).
    pub fn saw_result(&mut self, result: Result<Answer, FirnError>) -> Result<Answer, FirnError> {
        result.map(|a| self.saw(a))
    }

    /// Starts `request` after this session's token (see [`Router::submit`]).
    pub async fn submit(&self, router: &Router, request: Request) -> Pending {
        router.submit(&self.context(), request).await
    }

    /// Runs `request` in this session to its answer.
    pub async fn execute(
        &mut self,
        router: &Router,
        request: Request,
    ) -> Result<Answer, FirnError> {
        let result = router.execute(&self.context(), request).await;
        self.saw_result(result)
    }
}

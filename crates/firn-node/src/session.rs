//! A client's session, the same for both front ends: its causality token (the newest stamp
//! it was shown or given; what it sends comes after it) and its name. A RESP connection is
//! one session; over HTTP, each request is one, carried in by `Firn-After` and out by
//! `Firn-Token`; and whom it acts for ([`Principal`]), which every request is checked
//! against before it runs.

use std::time::Instant;

use bytes::Bytes;
use firn_model::{Access, Answer, CallContext, CommitTs, FirnError, Request};

use crate::auth::Principal;

use crate::exec::Pending;
use crate::router::Router;

/// A request started in a session, its answer to come. A write keeps what it takes to send
/// it again should it be refused for now (see [`Started::answer`]).
pub struct Started {
    pending: Pending,
    /// For a write: its context, itself, and when it was first submitted.
    again: Option<Box<(CallContext, Request, Instant)>>,
}

impl Started {
    /// Its answer. `last`: the session submitted nothing after it, so a write refused for
    /// now may be sent again without overtaking a later one (`Router::again_while_refused`).
    pub async fn answer(self, router: &Router, last: bool) -> Result<Answer, FirnError> {
        let result = self.pending.await;
        match self.again {
            Some(again) if last => {
                let (ctx, write, since) = *again;
                router.again_while_refused(&ctx, write, since, result).await
            }
            _ => result,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Session {
    token: Option<CommitTs>,
    name: Option<Bytes>,
    principal: Principal,
    /// Whether its answers carry large values whole (RESP), rather than naming them for the
    /// front end to stream (HTTP).
    whole_values: bool,
    /// The idempotency key of the call being made (see [`Session::with_once`]).
    once: Option<firn_model::IdemKey>,
}

/// How far ahead of this node's clock a token a client brings may be: stamps come from the
/// cluster's clocks, which differ by their skew. A token further ahead is refused: a write
/// after it would push this node's clock, and every stamp after it, into the future.
pub const TOKEN_AHEAD_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Checks a token a client brings (`FIRN.AFTER`, `Firn-After`) against this node's clock.
pub fn check_token(t: CommitTs) -> Result<CommitTs, FirnError> {
    let ahead = t.wall_us.saturating_sub(firn_model::hlc::system_wall_us());
    if ahead > TOKEN_AHEAD_MAX.as_micros() as u64 {
        return Err(FirnError::BadTime(format!(
            "token {t} is {} ms in the future; a token is a stamp this cluster gave, at most {} ms ahead of this node's clock",
            ahead / 1_000,
            TOKEN_AHEAD_MAX.as_millis()
        )));
    }
    Ok(t)
}

impl Session {
    /// A session whose answers carry large values whole (a RESP connection's).
    pub fn answering_whole_values() -> Self {
        Session {
            whole_values: true,
            ..Session::default()
        }
    }

    /// A session that comes after `token` (checked by [`check_token`]).
    pub fn after(token: Option<CommitTs>) -> Result<Self, FirnError> {
        Ok(Session {
            token: token.map(check_token).transpose()?,
            ..Session::default()
        })
    }

    /// The session acts for `principal` from now on.
    pub fn set_principal(&mut self, principal: Principal) {
        self.principal = principal;
    }

    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Whether the session may make a request that needs `needs` (see [`Principal::authorize`]).
    pub fn authorize(&self, needs: &[Access]) -> Result<(), FirnError> {
        self.principal.authorize(needs)
    }

    /// The causality token: the newest stamp this session has seen.
    pub fn token(&self) -> Option<CommitTs> {
        self.token
    }

    /// What this session sends from now on comes after `t` (and after what it saw); a `t`
    /// too far ahead (see [`check_token`]) is refused and changes nothing.
    pub fn advance(&mut self, t: CommitTs) -> Result<(), FirnError> {
        self.token = self.token.max(Some(check_token(t)?));
        Ok(())
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
        CallContext {
            once: self.once.clone(),
            ..CallContext::after(self.token)
        }
    }

    /// The context of the session's call of `request` (anything serializable that says
    /// what is asked): its idempotency key, if any, names the request's fingerprint.
    pub fn context_for(&self, request: &impl serde::Serialize) -> CallContext {
        let mut ctx = self.context();
        if let Some(key) = ctx.once.as_mut() {
            key.request = postcard::to_stdvec(request)
                .map(|bytes| xxhash_rust::xxh3::xxh3_64(&bytes))
                .unwrap_or_default();
        }
        ctx
    }

    /// The calls made from now until [`Session::without_once`] carry `key` (a front end
    /// sets it around the one request it came with).
    pub fn with_once(&mut self, key: firn_model::IdemKey) {
        self.once = Some(key);
    }

    pub fn without_once(&mut self) {
        self.once = None;
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

    /// Takes an outcome in as its client will see it: large values read into it if this
    /// session answers them whole (up to `RESP_VALUE_BYTES_MAX`), and the token raised to
    /// what it shows.
    pub async fn take(
        &mut self,
        router: &Router,
        result: Result<Answer, FirnError>,
    ) -> Result<Answer, FirnError> {
        let result = match self.whole_values {
            true => router.large().with_blob_values(result).await,
            false => result,
        };
        self.saw_result(result)
    }

    /// Runs `request` to its answer in this session: checked against whom it acts for, run
    /// after its token, and taken in (see [`Session::take`]).
    pub async fn run(&mut self, router: &Router, request: Request) -> Result<Answer, FirnError> {
        self.authorize(&request.access())?;
        let request = request.acting_as(self.principal.user_name());
        let result = router.execute(&self.context_for(&request), request).await;
        self.take(router, result).await
    }

    /// A put whose value streams in (HTTP; see `LargeValues::put_streamed`), run as
    /// [`Session::run`] runs a request.
    pub async fn put_streamed(
        &mut self,
        router: &Router,
        put: firn_model::PutRequest,
        body: impl futures::Stream<Item = Result<Bytes, FirnError>> + Send + Unpin,
    ) -> Result<Answer, FirnError> {
        self.authorize(&[Access::write_key(&put.key)])?;
        let result = router
            .large()
            .put_streamed(&self.context_for(&put), put, body)
            .await;
        self.take(router, result).await
    }

    /// Starts `request` after this session's token (see [`Router::submit`]).
    pub async fn submit(&self, router: &Router, request: Request) -> Started {
        let ctx = self.context_for(&request);
        let again = request
            .resent_when_refused()
            .then(|| Box::new((ctx.clone(), request.clone(), Instant::now())));
        Started {
            pending: router.submit(&ctx, request).await,
            again,
        }
    }
}

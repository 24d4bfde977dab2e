//! Redis SCAN cursor [MATCH p] [COUNT n] [TYPE t]: pages over every key with integer
//! cursors. Firn pages by key; `crate::cursors` maps one to the other on every node.

use bytes::Bytes;
use firn_model::{FirnError, KvRead, ReadAt, ReadConsistency, Response};

use crate::resp::Shared;
use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};
use crate::resp::reply::Reply;
use crate::session::Session;

pub const SCAN: CommandSpec = CommandSpec {
    name: "scan",
    arity: -2,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::NONE,
    group: Group::Generic,
    since: FIRST_RELEASE,
    summary: "A page of keys and the cursor of the next (0: done); COUNT is keys examined.",
    parse: scan,
};

/// A parsed SCAN, run by the connection in its session.
pub struct RedisScan {
    cursor: u64,
    pattern: Option<Bytes>,
    count: usize,
    type_filter: Option<String>,
}

fn scan(mut args: Args) -> Result<Action, FirnError> {
    let cursor = args
        .text()?
        .parse::<u64>()
        .map_err(|_| FirnError::BadArgument("invalid cursor".into()))?;
    let (mut pattern, mut count, mut type_filter) = (None, 10usize, None);
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "MATCH" => pattern = Some(args.bytes()?),
            "COUNT" => count = args.usize("COUNT")?,
            "TYPE" => type_filter = Some(args.text()?.to_lowercase()),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "syntax error: unknown SCAN option '{other}'"
                )));
            }
        }
    }
    Ok(Action::RedisScan(RedisScan {
        cursor,
        pattern,
        count,
        type_filter,
    }))
}

impl RedisScan {
    /// Reads the page in the connection's session (after its token, raising it to what the
    /// page showed).
    pub async fn run(self, shared: &Shared, session: &mut Session) -> Reply {
        let cursors = shared.router.cursors();
        let after = if self.cursor == 0 {
            None
        } else {
            match cursors.resolve(self.cursor).await {
                Ok(k) => Some(k),
                Err(e) => return Reply::error(&e),
            }
        };
        let request = KvRead::Scan {
            prefix: Bytes::new(),
            cursor: after,
            limit: self.count.clamp(1, firn_model::limits::PAGE_ITEMS_MAX),
            pattern: self.pattern,
            at: ReadAt::Latest,
            consistency: ReadConsistency::Linearizable,
        };
        match session
            .run(&shared.router, request.into())
            .await
            .map(|a| a.response)
        {
            Ok(Response::Scan { keys, next_cursor }) => {
                let next = next_cursor.map_or(0, |k| cursors.issue(k));
                Reply::Array(vec![
                    Reply::text(next.to_string()),
                    Reply::Array(
                        keys.into_iter()
                            .filter(|(_, info)| {
                                self.type_filter
                                    .as_deref()
                                    .is_none_or(|t| t == info.kind.name())
                            })
                            .map(|(k, _)| Reply::Bulk(k.bytes().clone()))
                            .collect(),
                    ),
                ])
            }
            Ok(other) => Reply::error(&FirnError::Internal(format!("scan answered {other:?}"))),
            Err(e) => Reply::error(&e),
        }
    }
}

impl RedisScan {
    /// SCAN reads every key its pattern can match: those under the pattern's literal start.
    pub fn access(&self) -> Vec<firn_model::Access> {
        let prefix = self
            .pattern
            .as_deref()
            .map_or_else(Bytes::new, firn_model::request::access::glob_prefix);
        vec![firn_model::Access::read(firn_model::Scope::Prefix(prefix))]
    }
}

//! XADD key [NOMKSTREAM] [IDMP producer id] [MAXLEN|MINID [=|~] threshold [LIMIT count]] id
//! field value… (IDMP as Redis 8.6's: the entry is added once per key) and
//! XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]: a stream's writes, parsed with
//! Redis's rules and words. `~` trims exactly, as `=` does (Redis may keep more; exact is
//! within what it promises); its `LIMIT k` evicts at most k entries, the oldest, and an
//! XADD's trim with a LIMIT keeps the entry it adds.

use bytes::Bytes;
use firn_model::log::encode_fields;
use firn_model::{FirnError, LogSeq, LogWrite, Response, StreamId, StreamTrim};

use super::{invalid_stream_id, redis_integer, stream_id, syntax_error};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XADD: CommandSpec = CommandSpec {
    name: "xadd",
    arity: -5,
    flags: &[Flag::Write],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "Appends an entry to the stream and answers its id; NOMKSTREAM, MAXLEN/MINID trim after.",
    parse: xadd,
};

pub const XTRIM: CommandSpec = CommandSpec {
    name: "xtrim",
    arity: -4,
    flags: &[Flag::Write],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "Trims the stream to MAXLEN entries or drops those below MINID; answers how many went.",
    parse: xtrim,
};

fn xadd(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    let mut no_create = false;
    let mut once = None;
    let mut trim = TrimOptions::default();
    // Options until the id, as Redis reads them: a keyword that is the last argument is
    // taken as the id.
    let id = loop {
        let word = args.text()?;
        let upper = word.to_ascii_uppercase();
        match upper.as_str() {
            "NOMKSTREAM" => no_create = true,
            "IDMP" if once.is_none() && args.len() > 2 => {
                once = Some(firn_model::IdemKey::new(args.bytes()?, args.bytes()?)?)
            }
            "MAXLEN" | "MINID" | "LIMIT" if !args.is_empty() => trim.take(&upper, &mut args)?,
            _ => break xadd_id(&word)?,
        }
    };
    let trim = trim.finish(false)?;
    // Field, value, …: at least one pair, and whole pairs.
    if args.is_empty() || args.len() % 2 == 1 {
        return Err(FirnError::WrongArity("xadd".into()));
    }
    let items = args.rest();
    let fields: Vec<(Bytes, Bytes)> = items
        .chunks_exact(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    let add = Action::execute(
        LogWrite::StreamAdd {
            key,
            id,
            payload: encode_fields(&fields),
            trim,
            no_create,
        },
        Render::new(show_id),
    );
    Ok(match once {
        Some(key) => Action::Once(key, Box::new(add)),
        None => add,
    })
}

fn xtrim(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    let mut trim = TrimOptions::default();
    while !args.is_empty() {
        let option = args.keyword()?;
        match option.as_str() {
            "MAXLEN" | "MINID" | "LIMIT" if !args.is_empty() => trim.take(&option, &mut args)?,
            _ => return Err(syntax_error()),
        }
    }
    let trim = trim.finish(true)?.ok_or_else(syntax_error)?;
    Ok(Action::execute(
        LogWrite::StreamTrim { key, trim },
        Render::new(show_count),
    ))
}

/// XADD's id: `*`, `ms-*`, `ms-n` or `ms`, with Redis's words for a malformed one.
fn xadd_id(text: &str) -> Result<StreamId, FirnError> {
    text.parse().map_err(|e| {
        // `0-0` parses as an id but is refused as one: say so, as Redis does.
        if LogSeq::parse_bound(text, false) == Ok(LogSeq::ZERO) {
            e
        } else {
            invalid_stream_id()
        }
    })
}

/// XADD's and XTRIM's trim options as Redis parses them.
#[derive(Default)]
struct TrimOptions {
    strategy: Option<StreamTrim>,
    approximate: bool,
    limit: Option<i64>,
}

impl TrimOptions {
    /// Takes the arguments of `MAXLEN|MINID [=|~] threshold` or `LIMIT count` (`keyword`
    /// already taken, upper case).
    fn take(&mut self, keyword: &str, args: &mut Args) -> Result<(), FirnError> {
        if keyword == "LIMIT" {
            let n = redis_integer(args)?;
            if n < 0 {
                return Err(FirnError::BadArgument(
                    "The LIMIT argument must be >= 0.".into(),
                ));
            }
            self.limit = Some(n);
            return Ok(());
        }
        if self.strategy.is_some() {
            return Err(FirnError::BadArgument(
                "syntax error, MAXLEN and MINID options at the same time are not compatible".into(),
            ));
        }
        self.approximate = false;
        if args.len() >= 2 {
            match args.peek_keyword().as_deref() {
                Some("~") => {
                    self.approximate = true;
                    args.bytes()?;
                }
                Some("=") => {
                    args.bytes()?;
                }
                _ => {}
            }
        }
        self.strategy = Some(if keyword == "MAXLEN" {
            let n = redis_integer(args)?;
            let n = u64::try_from(n)
                .map_err(|_| FirnError::BadArgument("The MAXLEN argument must be >= 0.".into()))?;
            StreamTrim::MaxLen {
                len: n,
                limit: None,
            }
        } else {
            StreamTrim::MinId {
                id: stream_id(&args.text()?, false)?,
                limit: None,
            }
        });
        Ok(())
    }

    /// The trim, once Redis's rules for combining the options hold.
    fn finish(self, xtrim: bool) -> Result<Option<StreamTrim>, FirnError> {
        let refuse = |why: &str| Err(FirnError::BadArgument(format!("syntax error, {why}")));
        if self.limit.is_some_and(|n| n > 0) && self.strategy.is_none() {
            return refuse("LIMIT cannot be used without specifying a trimming strategy");
        }
        if xtrim && self.strategy.is_none() {
            return refuse("XTRIM must be called with a trimming strategy");
        }
        if self.limit.is_some() && !self.approximate {
            return refuse("LIMIT cannot be used without the special ~ option");
        }
        // LIMIT 0 is no bound, as in Redis.
        let limit = self.limit.filter(|n| *n > 0).map(|n| n as u64);
        Ok(self.strategy.map(|trim| match trim {
            StreamTrim::MaxLen { len, .. } => StreamTrim::MaxLen { len, limit },
            StreamTrim::MinId { id, .. } => StreamTrim::MinId { id, limit },
        }))
    }
}

/// The new entry's id, or nil (NOMKSTREAM and no stream).
fn show_id(response: Response) -> Reply {
    match response {
        Response::Appended(a) => a
            .first()
            .map_or(Reply::Nil, |a| Reply::text(a.seq.to_string())),
        other => unexpected("XADD", other),
    }
}

fn show_count(response: Response) -> Reply {
    match response {
        Response::Count(n) => Reply::Int(n as i64),
        other => unexpected("XTRIM", other),
    }
}

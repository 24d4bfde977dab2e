//! The module `firn` a function imports: its input, reads at the run's cut (keys, prefixes,
//! log tags), writes, `reply` and `log` (the ABI of docs/functions.md). Each call counts
//! against the run's budget; a bad pointer or length ends the run.

use bytes::Bytes;
use firn_model::LogSeq;
use firn_model::limits::{FUNCTION_LOG_READ_RECORDS_MAX, FUNCTION_SCAN_KEYS_MAX};
use firn_model::log::LOG_TAGS_MAX;
use wasmi::{Caller, Error as WasmError, Linker};

use super::sandbox::{
    Effect, LIMIT, ReadPoint, RunState, TOO_SMALL, answer_bytes, answer_read, read_guest,
};

/// Fields and values (or tags) encoded as `[u32 LE length][bytes]…` (see [`push_item`]).
fn decode_items(mut b: &[u8]) -> Option<Vec<Bytes>> {
    let mut items = Vec::new();
    while !b.is_empty() {
        let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        items.push(Bytes::copy_from_slice(b.get(4..4 + len)?));
        b = &b[4 + len..];
    }
    Some(items)
}

/// Appends `part` as an item of `[u32 LE length][bytes]…`, the encoding of `scan`'s keys,
/// `log_read`'s records, `xadd`'s fields and `log_append`'s tags.
pub(super) fn push_item(out: &mut Vec<u8>, part: &[u8]) {
    out.extend_from_slice(&(part.len() as u32).to_le_bytes());
    out.extend_from_slice(part);
}

/// The module `firn`: inputs, reads, writes, reply and log (docs/functions.md).
pub(super) fn define(linker: &mut Linker<RunState>) -> Result<(), wasmi::errors::LinkerError> {
    linker.func_wrap("firn", "kind", |c: Caller<'_, RunState>| {
        c.data().input.kind as i32
    })?;
    linker.func_wrap("firn", "key_count", |c: Caller<'_, RunState>| {
        c.data().input.keys.len() as i32
    })?;
    linker.func_wrap("firn", "arg_count", |c: Caller<'_, RunState>| {
        c.data().input.args.len() as i32
    })?;
    linker.func_wrap("firn", "stamp_us", |c: Caller<'_, RunState>| {
        c.data().input.stamp_us as i64
    })?;
    linker.func_wrap("firn", "input_version", |c: Caller<'_, RunState>| {
        c.data().input.input_version as i64
    })?;
    linker.func_wrap(
        "firn",
        "key",
        |mut c: Caller<'_, RunState>, i: i32, buf: i32, cap: i32| -> Result<i32, WasmError> {
            let Some(k) = c.data().input.keys.get(i as usize).cloned() else {
                return Ok(-1);
            };
            Ok(answer_bytes(&mut c, &k, buf, cap)? as i32)
        },
    )?;
    linker.func_wrap(
        "firn",
        "arg",
        |mut c: Caller<'_, RunState>, i: i32, buf: i32, cap: i32| -> Result<i32, WasmError> {
            let Some(a) = c.data().input.args.get(i as usize).cloned() else {
                return Ok(-1);
            };
            Ok(answer_bytes(&mut c, &a, buf, cap)? as i32)
        },
    )?;
    linker.func_wrap(
        "firn",
        "get",
        |mut c: Caller<'_, RunState>, kp: i32, kl: i32, buf: i32, cap: i32| {
            c.data_mut().call()?;
            let key = read_guest(&c, kp, kl)?;
            let value = c.data_mut().read(&key, ReadPoint::Now);
            answer_read(&mut c, value, buf, cap)
        },
    )?;
    linker.func_wrap(
        "firn",
        "get_version",
        |mut c: Caller<'_, RunState>, kp: i32, kl: i32, v: i64, buf: i32, cap: i32| {
            c.data_mut().call()?;
            let key = read_guest(&c, kp, kl)?;
            let value = c.data_mut().read(&key, ReadPoint::Version(v.max(0) as u64));
            answer_read(&mut c, value, buf, cap)
        },
    )?;
    linker.func_wrap(
        "firn",
        "get_at",
        |mut c: Caller<'_, RunState>, kp: i32, kl: i32, at: i64, buf: i32, cap: i32| {
            c.data_mut().call()?;
            let key = read_guest(&c, kp, kl)?;
            // No later than the run's own stamp: a run sees nothing after its cut.
            let at = (at.max(0) as u64).min(c.data().input.stamp_us);
            let value = c.data_mut().read(&key, ReadPoint::AtUs(at));
            answer_read(&mut c, value, buf, cap)
        },
    )?;
    linker.func_wrap(
        "firn",
        "scan",
        |mut c: Caller<'_, RunState>,
         pp: i32,
         pl: i32,
         ap: i32,
         al: i32,
         buf: i32,
         cap: i32|
         -> Result<i64, WasmError> {
            c.data_mut().call()?;
            let (prefix, after) = (read_guest(&c, pp, pl)?, read_guest(&c, ap, al)?);
            let keys = match c
                .data_mut()
                .host
                .scan(&prefix, &after, FUNCTION_SCAN_KEYS_MAX)
            {
                Ok(keys) => keys,
                Err(e) => return answer_read(&mut c, Err(e), buf, cap),
            };
            let mut out = Vec::new();
            for k in keys {
                if out.len() + 4 + k.len() > cap.max(0) as usize {
                    break;
                }
                push_item(&mut out, &k);
            }
            if out.is_empty() && cap >= 0 {
                // Keys there, but not even the first fits.
                let more = c.data_mut().host.scan(&prefix, &after, 1);
                if matches!(more, Ok(ref k) if !k.is_empty()) {
                    return Ok(TOO_SMALL);
                }
            }
            answer_bytes(&mut c, &out, buf, cap)
        },
    )?;
    linker.func_wrap("firn", "log_read", log_read)?;
    linker.func_wrap(
        "firn",
        "put",
        |mut c: Caller<'_, RunState>, kp: i32, kl: i32, vp: i32, vl: i32| {
            c.data_mut().call()?;
            let (k, v) = (read_guest(&c, kp, kl)?, read_guest(&c, vp, vl)?);
            Ok::<i32, WasmError>(c.data_mut().write(Effect::Put(k, v)))
        },
    )?;
    linker.func_wrap(
        "firn",
        "del",
        |mut c: Caller<'_, RunState>, kp: i32, kl: i32| {
            c.data_mut().call()?;
            let k = read_guest(&c, kp, kl)?;
            Ok::<i32, WasmError>(c.data_mut().write(Effect::Del(k)))
        },
    )?;
    linker.func_wrap(
        "firn",
        "incr",
        |mut c: Caller<'_, RunState>, kp: i32, kl: i32, delta: i64| {
            c.data_mut().call()?;
            let k = read_guest(&c, kp, kl)?;
            Ok::<i32, WasmError>(c.data_mut().write(Effect::Incr(k, delta)))
        },
    )?;
    linker.func_wrap(
        "firn",
        "xadd",
        |mut c: Caller<'_, RunState>, sp: i32, sl: i32, fp: i32, fl: i32| {
            c.data_mut().call()?;
            let (stream, fields) = (read_guest(&c, sp, sl)?, read_guest(&c, fp, fl)?);
            let Some(items) = decode_items(&fields).filter(|i| !i.is_empty() && i.len() % 2 == 0)
            else {
                return Ok::<i32, WasmError>(LIMIT);
            };
            let pairs = items
                .chunks(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect();
            Ok(c.data_mut().write(Effect::XAdd(stream, pairs)))
        },
    )?;
    linker.func_wrap(
        "firn",
        "log_append",
        |mut c: Caller<'_, RunState>, lp: i32, ll: i32, tp: i32, tl: i32, pp: i32, pl: i32| {
            c.data_mut().call()?;
            let log = read_guest(&c, lp, ll)?;
            let (tags, payload) = (read_guest(&c, tp, tl)?, read_guest(&c, pp, pl)?);
            let Some(tags) = decode_items(&tags).filter(|t| (1..=LOG_TAGS_MAX).contains(&t.len()))
            else {
                return Ok::<i32, WasmError>(LIMIT);
            };
            Ok(c.data_mut().write(Effect::Append(log, tags, payload)))
        },
    )?;
    linker.func_wrap(
        "firn",
        "publish",
        |mut c: Caller<'_, RunState>, cp: i32, cl: i32, mp: i32, ml: i32| {
            c.data_mut().call()?;
            let (channel, message) = (read_guest(&c, cp, cl)?, read_guest(&c, mp, ml)?);
            Ok::<i32, WasmError>(c.data_mut().write(Effect::Publish(channel, message)))
        },
    )?;
    linker.func_wrap(
        "firn",
        "reply",
        |mut c: Caller<'_, RunState>, p: i32, l: i32| {
            c.data_mut().call()?;
            let reply = read_guest(&c, p, l)?;
            c.data_mut().reply = Some(reply);
            Ok::<(), WasmError>(())
        },
    )?;
    linker.func_wrap(
        "firn",
        "log",
        |mut c: Caller<'_, RunState>, p: i32, l: i32| {
            c.data_mut().call()?;
            let line = read_guest(&c, p, l)?;
            c.data_mut()
                .log_line(String::from_utf8_lossy(&line).into_owned());
            Ok::<(), WasmError>(())
        },
    )?;
    Ok(())
}

/// `log_read(lp, ll, tp, tl, ap, al, buf, cap)`: the records of tag (`tp`, `tl`) of log
/// (`lp`, `ll`) after the id (`ap`, `al`) (empty: from the first), as of the run's cut,
/// written to `buf` as `[u32 LE length][id][u32 LE length][payload]…`, as many as fit.
#[allow(clippy::too_many_arguments)]
fn log_read(
    mut c: Caller<'_, RunState>,
    lp: i32,
    ll: i32,
    tp: i32,
    tl: i32,
    ap: i32,
    al: i32,
    buf: i32,
    cap: i32,
) -> Result<i64, WasmError> {
    c.data_mut().call()?;
    let (log, tag, after) = (
        read_guest(&c, lp, ll)?,
        read_guest(&c, tp, tl)?,
        read_guest(&c, ap, al)?,
    );
    let after = if after.is_empty() {
        None
    } else {
        let id = std::str::from_utf8(&after)
            .ok()
            .and_then(|t| t.parse::<LogSeq>().ok());
        Some(id.ok_or_else(|| {
            WasmError::new(format!(
                "log_read: '{}' is not a record id (ms-n)",
                String::from_utf8_lossy(&after)
            ))
        })?)
    };
    let records = match c
        .data_mut()
        .host
        .log_read(&log, &tag, after, FUNCTION_LOG_READ_RECORDS_MAX)
    {
        Ok(records) => records,
        Err(e) => return answer_read(&mut c, Err(e), buf, cap),
    };
    let mut out = Vec::new();
    for (seq, payload) in &records {
        let id = seq.to_string();
        if out.len() + 8 + id.len() + payload.len() > cap.max(0) as usize {
            break;
        }
        push_item(&mut out, id.as_bytes());
        push_item(&mut out, payload);
    }
    if out.is_empty() && !records.is_empty() {
        return Ok(TOO_SMALL);
    }
    answer_bytes(&mut c, &out, buf, cap)
}

//! Commands split off a connection's input: RESP2 arrays of bulk strings, and inline commands
//! (`PING\r\n`, as typed into telnet). Pure: it reads and consumes the buffer it is given and
//! never touches a socket, so the fuzz targets run exactly what a connection runs.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2;

use super::reply::Reply;

/// One command as received: its upper-cased name and arguments.
pub type Frame = (String, VecDeque<Bytes>);

/// Takes one complete command from `input`, if there is one (`None`: more bytes are needed).
/// A malformed frame yields an error reply and the unparseable input is dropped, so the
/// connection can go on.
pub fn next_command(input: &mut BytesMut) -> Option<Result<Frame, Reply>> {
    // Empty lines between commands are skipped, as Redis does (`redis-cli --pipe` sends
    // one before its closing ECHO).
    while input.first().is_some_and(|b| *b != b'*') {
        match next_inline(input)? {
            Some(frame) => return Some(Ok(frame)),
            None => continue,
        }
    }
    if input.is_empty() {
        return None;
    }
    match resp2::decode::decode_bytes_mut(input) {
        Ok(Some((frame, _, _))) => Some(frame_to_command(frame)),
        Ok(None) => None,
        Err(e) => {
            input.clear();
            Some(Err(Reply::Error(format!(
                "ERR Protocol error: {}",
                e.details().replace(['\r', '\n'], " ")
            ))))
        }
    }
}

/// An inline command: `None` while the line is incomplete, `Some(None)` for an empty line
/// (consumed).
fn next_inline(input: &mut BytesMut) -> Option<Option<Frame>> {
    let end = input.iter().position(|&b| b == b'\n')?;
    let line = input.split_to(end + 1);
    let text = String::from_utf8_lossy(&line);
    let mut words = text
        .split_whitespace()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()));
    let Some(name) = words.next() else {
        return Some(None);
    };
    Some(Some((
        String::from_utf8_lossy(&name).to_ascii_uppercase(),
        words.collect(),
    )))
}

fn frame_to_command(frame: resp2::types::BytesFrame) -> Result<Frame, Reply> {
    use resp2::types::BytesFrame as F;
    let F::Array(parts) = frame else {
        return Err(Reply::Error(
            "ERR Protocol error: expected an array of bulk strings".into(),
        ));
    };
    let mut items = VecDeque::with_capacity(parts.len());
    for part in parts {
        match part {
            F::BulkString(b) | F::SimpleString(b) => items.push_back(b),
            F::Integer(i) => items.push_back(Bytes::from(i.to_string())),
            _ => {
                return Err(Reply::Error(
                    "ERR Protocol error: command arguments must be bulk strings".into(),
                ));
            }
        }
    }
    let Some(name) = items.pop_front() else {
        return Err(Reply::Error("ERR Protocol error: empty command".into()));
    };
    Ok((String::from_utf8_lossy(&name).to_ascii_uppercase(), items))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(input: &[u8]) -> Vec<Result<Frame, Reply>> {
        let mut input = BytesMut::from(input);
        std::iter::from_fn(|| next_command(&mut input)).collect()
    }

    #[test]
    fn arrays_and_inline_commands_split_in_order_and_a_partial_frame_waits() {
        let got = commands(b"*2\r\n$3\r\nget\r\n$1\r\nk\r\n\r\nping x\r\n*1\r\n$4\r\nPI");
        let names: Vec<_> = got.into_iter().map(|c| c.unwrap()).collect();
        assert_eq!(names.len(), 2);
        assert_eq!(names[0].0, "GET");
        assert_eq!(names[0].1, [Bytes::from_static(b"k")]);
        assert_eq!(names[1].0, "PING");
        assert_eq!(names[1].1, [Bytes::from_static(b"x")]);
    }

    #[test]
    fn a_malformed_frame_is_an_error_reply_and_the_input_is_dropped() {
        let mut input = BytesMut::from(&b"*1\r\n$x\r\nping\r\n"[..]);
        assert!(matches!(
            next_command(&mut input),
            Some(Err(Reply::Error(_)))
        ));
        assert!(input.is_empty());
        // An empty array and an array inside one are refused; an integer is an argument.
        let got = commands(b"*0\r\n*1\r\n*0\r\n*1\r\n:5\r\n");
        assert_eq!(got.len(), 3);
        assert!(got[..2].iter().all(Result::is_err));
        assert!(matches!(&got[2], Ok((name, args)) if name == "5" && args.is_empty()));
    }
}

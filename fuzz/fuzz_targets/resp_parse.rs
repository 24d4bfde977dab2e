//! RESP input as a connection reads it: frames split off the buffer (inline commands too),
//! each turned into a command name and arguments, then parsed by the command registry into
//! the typed action the router would run. No input may panic.
#![no_main]

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use firn_node::resp::registry;
use firn_node::resp::reply::Reply;
use libfuzzer_sys::fuzz_target;
use redis_protocol::resp2;
use redis_protocol::resp2::types::BytesFrame as F;

fuzz_target!(|data: &[u8]| {
    let mut input = BytesMut::from(data);
    // At most as many commands as bytes: each one consumes at least one.
    for _ in 0..=data.len() {
        let Some((name, items)) = next_command(&mut input) else {
            break;
        };
        if let Err(e) = registry::dispatch(&name, items) {
            let mut out = BytesMut::new();
            Reply::error(&e).encode(2, &mut out);
            Reply::error(&e).encode(3, &mut out);
        }
    }
});

/// One command off the buffer, as `resp::Connection::next_frame` takes it; `None` when the
/// input is used up, incomplete or malformed.
fn next_command(input: &mut BytesMut) -> Option<(String, VecDeque<Bytes>)> {
    while input.first().is_some_and(|b| *b != b'*') {
        let end = input.iter().position(|&b| b == b'\n')?;
        let line = input.split_to(end + 1);
        let text = String::from_utf8_lossy(&line);
        let mut words = text.split_whitespace().map(|w| Bytes::copy_from_slice(w.as_bytes()));
        if let Some(name) = words.next() {
            return Some((String::from_utf8_lossy(&name).to_ascii_uppercase(), words.collect()));
        }
    }
    if input.is_empty() {
        return None;
    }
    let (frame, _, _) = resp2::decode::decode_bytes_mut(input).ok()??;
    let F::Array(parts) = frame else { return Some((String::new(), VecDeque::new())) };
    let mut items = VecDeque::with_capacity(parts.len());
    for part in parts {
        match part {
            F::BulkString(b) | F::SimpleString(b) => items.push_back(b),
            F::Integer(i) => items.push_back(Bytes::from(i.to_string())),
            _ => return Some((String::new(), VecDeque::new())),
        }
    }
    let name = items.pop_front()?;
    Some((String::from_utf8_lossy(&name).to_ascii_uppercase(), items))
}

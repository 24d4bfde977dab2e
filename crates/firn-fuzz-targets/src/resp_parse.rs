//! RESP input as a connection reads it: commands split off the buffer
//! ([`firn_node::resp::frame::next_command`], inline commands too), each parsed by the command
//! registry into the typed action the router would run; an error is rendered as a RESP2 and
//! a RESP3 reply, as the connection answers it.

use bytes::BytesMut;
use firn_node::resp::frame::next_command;
use firn_node::resp::registry;
use firn_node::resp::reply::Reply;

pub fn resp_parse(data: &[u8]) {
    let mut input = BytesMut::from(data);
    // At most as many commands as bytes: each one consumes at least one.
    for _ in 0..=data.len() {
        let Some(command) = next_command(&mut input) else {
            break;
        };
        let refused = match command {
            Ok((name, items)) => match registry::dispatch(&name, items) {
                Ok(_) => continue,
                Err(e) => Reply::error(&e),
            },
            Err(reply) => reply,
        };
        let mut out = BytesMut::new();
        refused.encode(2, &mut out);
        refused.encode(3, &mut out);
    }
}

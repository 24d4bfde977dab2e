//! A RESP reply, independent of the protocol version, and its encoding as RESP2 or RESP3.

use bytes::{Bytes, BytesMut};
use redis_protocol::{resp2, resp3};

use firn_model::FirnError;

#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Ok,
    Simple(String),
    /// A whole error line: code, space, message.
    Error(String),
    Int(i64),
    Bulk(Bytes),
    Nil,
    Array(Vec<Reply>),
    /// A map in RESP3; a flat key, value, key, value… array in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// A map in RESP3; an array of `[key, value]` arrays in RESP2 (XREAD's streams, as
    /// Redis answers them).
    MapOrPairs(Vec<(Reply, Reply)>),
    /// An out-of-band message in RESP3; an array in RESP2 (pub/sub style).
    Push(Vec<Reply>),
}

impl Reply {
    pub fn bulk(s: impl Into<Bytes>) -> Reply {
        Reply::Bulk(s.into())
    }

    pub fn text(s: impl AsRef<str>) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(s.as_ref().as_bytes()))
    }

    pub fn error(e: &FirnError) -> Reply {
        // An error line may not contain CR or LF.
        let msg = e.to_string().replace(['\r', '\n'], " ");
        Reply::Error(format!("{} {}", e.resp_code(), msg))
    }

    /// The bytes of its strings, nested ones included: about what encoding it takes (the
    /// framing aside), known before encoding it.
    pub fn payload_bytes(&self) -> usize {
        match self {
            Reply::Ok | Reply::Int(_) | Reply::Nil => 0,
            Reply::Simple(s) | Reply::Error(s) => s.len(),
            Reply::Bulk(b) => b.len(),
            Reply::Array(items) | Reply::Push(items) => {
                items.iter().map(Reply::payload_bytes).sum()
            }
            Reply::Map(pairs) | Reply::MapOrPairs(pairs) => pairs
                .iter()
                .map(|(k, v)| k.payload_bytes() + v.payload_bytes())
                .sum(),
        }
    }

    pub fn encode(&self, proto: u8, out: &mut BytesMut) {
        // Encoding our own well-formed frames into a growable buffer cannot fail.
        if proto >= 3 {
            resp3::encode::complete::extend_encode(out, &self.to_resp3(), false)
                .expect("encoding a RESP3 frame");
        } else {
            resp2::encode::extend_encode(out, &self.to_resp2(), false)
                .expect("encoding a RESP2 frame");
        }
    }

    fn to_resp2(&self) -> resp2::types::BytesFrame {
        use resp2::types::BytesFrame as F;
        match self {
            Reply::Ok => F::SimpleString(Bytes::from_static(b"OK")),
            Reply::Simple(s) => F::SimpleString(Bytes::copy_from_slice(s.as_bytes())),
            Reply::Error(e) => F::Error(e.clone().into()),
            Reply::Int(i) => F::Integer(*i),
            Reply::Bulk(b) => F::BulkString(b.clone()),
            Reply::Nil => F::Null,
            Reply::Array(items) | Reply::Push(items) => {
                F::Array(items.iter().map(Reply::to_resp2).collect())
            }
            Reply::Map(pairs) => F::Array(
                pairs
                    .iter()
                    .flat_map(|(k, v)| [k.to_resp2(), v.to_resp2()])
                    .collect(),
            ),
            Reply::MapOrPairs(pairs) => F::Array(
                pairs
                    .iter()
                    .map(|(k, v)| F::Array(vec![k.to_resp2(), v.to_resp2()]))
                    .collect(),
            ),
        }
    }

    fn to_resp3(&self) -> resp3::types::BytesFrame {
        use resp3::types::BytesFrame as F;
        match self {
            Reply::Ok => F::SimpleString {
                data: Bytes::from_static(b"OK"),
                attributes: None,
            },
            Reply::Simple(s) => F::SimpleString {
                data: Bytes::copy_from_slice(s.as_bytes()),
                attributes: None,
            },
            Reply::Error(e) => F::SimpleError {
                data: e.clone().into(),
                attributes: None,
            },
            Reply::Int(i) => F::Number {
                data: *i,
                attributes: None,
            },
            Reply::Bulk(b) => F::BlobString {
                data: b.clone(),
                attributes: None,
            },
            Reply::Nil => F::Null,
            Reply::Array(items) => F::Array {
                data: items.iter().map(Reply::to_resp3).collect(),
                attributes: None,
            },
            Reply::Push(items) => F::Push {
                data: items.iter().map(Reply::to_resp3).collect(),
                attributes: None,
            },
            Reply::Map(pairs) | Reply::MapOrPairs(pairs) => F::Map {
                data: pairs
                    .iter()
                    .map(|(k, v)| (k.to_resp3(), v.to_resp3()))
                    .collect(),
                attributes: None,
            },
        }
    }
}

/// `OK`, or the error.
pub fn answered(result: Result<(), FirnError>) -> Reply {
    match result {
        Ok(()) => Reply::Ok,
        Err(e) => Reply::error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(reply: Reply, proto: u8) -> String {
        let mut out = BytesMut::new();
        reply.encode(proto, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn maps_flatten_in_resp2_and_stay_maps_in_resp3() {
        let map = Reply::Map(vec![(Reply::text("version"), Reply::Int(3))]);
        assert_eq!(encoded(map.clone(), 2), "*2\r\n$7\r\nversion\r\n:3\r\n");
        assert_eq!(encoded(map, 3), "%1\r\n$7\r\nversion\r\n:3\r\n");
        let pairs = Reply::MapOrPairs(vec![(Reply::text("s"), Reply::Int(1))]);
        assert_eq!(encoded(pairs.clone(), 2), "*1\r\n*2\r\n$1\r\ns\r\n:1\r\n");
        assert_eq!(encoded(pairs, 3), "%1\r\n$1\r\ns\r\n:1\r\n");
        assert_eq!(encoded(Reply::Nil, 2), "$-1\r\n");
        assert_eq!(encoded(Reply::Nil, 3), "_\r\n");
    }

    #[test]
    fn error_lines_carry_the_code_and_no_newlines() {
        let e = FirnError::BadArgument("bad\r\nthing".into());
        assert_eq!(encoded(Reply::error(&e), 2), "-ERR bad  thing\r\n");
        assert_eq!(
            encoded(Reply::error(&FirnError::Conflict { current: 4 }), 2),
            "-CONFLICT condition failed: the key's current version is 4\r\n"
        );
    }
}

//! A connection's packets off the wire: `rmqtt-codec`'s codec, with one look of Firn's own at
//! each whole 5.0 PUBLISH before it. The codec refuses a Topic Alias of 0 as a malformed
//! packet; MQTT 5.0 (3.3.2.3.4) makes it an invalid alias, answered with DISCONNECT `Topic
//! Alias invalid` — the look lets the connection say so. It only reads: a packet it cannot
//! follow is left to the codec, which refuses what is malformed.

use bytes::{Buf, BytesMut};
use rmqtt_codec::error::{DecodeError, EncodeError};
use rmqtt_codec::{MqttCodec, MqttPacket};
use tokio_util::codec::{Decoder, Encoder};

/// What a connection reads.
#[derive(Debug)]
pub enum Frame {
    Packet(MqttPacket),
    /// A 5.0 PUBLISH with a Topic Alias of 0 (taken off the wire whole).
    AliasZero,
}

/// The codec of a connection: `rmqtt-codec`'s for its protocol level, behind the look.
pub struct FrameCodec {
    pub mqtt: MqttCodec,
}

const PUBLISH: u8 = 3;
/// The Topic Alias property's identifier.
const TOPIC_ALIAS: u8 = 0x23;

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = DecodeError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, DecodeError> {
        if let MqttCodec::V5(codec) = &self.mqtt {
            let max = codec.max_inbound_size();
            match fixed_header(src) {
                Some((remaining, header)) if max == 0 || remaining <= max as usize => {
                    let Some(whole) = src.get(..header + remaining) else {
                        // The codec is given whole packets only: it then never holds a
                        // header of its own between two reads, and the look always starts
                        // at one.
                        src.reserve(header + remaining - src.len());
                        return Ok(None);
                    };
                    if whole[0] >> 4 == PUBLISH && alias_is_zero(whole[0], &whole[header..]) {
                        src.advance(header + remaining);
                        return Ok(Some(Frame::AliasZero));
                    }
                }
                // Incomplete, too large or malformed: the codec's to answer.
                _ => {}
            }
        }
        Ok(self
            .mqtt
            .decode(src)?
            .map(|(packet, _)| Frame::Packet(packet)))
    }
}

impl Encoder<MqttPacket> for FrameCodec {
    type Error = EncodeError;

    fn encode(&mut self, packet: MqttPacket, dst: &mut BytesMut) -> Result<(), EncodeError> {
        self.mqtt.encode(packet, dst)
    }
}

/// A packet's remaining length and the length of its fixed header, once both are in `src`.
fn fixed_header(src: &[u8]) -> Option<(usize, usize)> {
    let (remaining, used) = varint(src.get(1..)?)?;
    Some((remaining, 1 + used))
}

/// A variable byte integer (at most 4 bytes) and its length.
fn varint(b: &[u8]) -> Option<(usize, usize)> {
    let mut value = 0usize;
    for (i, byte) in b.iter().take(4).enumerate() {
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Whether a 5.0 PUBLISH (`flags` its first byte, `body` after its fixed header) has a
/// Topic Alias of 0. One it cannot follow has none, as far as it knows.
fn alias_is_zero(flags: u8, body: &[u8]) -> bool {
    let mut at = 2 + usize::from(u16::from_be_bytes([
        *body.first().unwrap_or(&0),
        *body.get(1).unwrap_or(&0),
    ]));
    if (flags >> 1) & 0b11 > 0 {
        at += 2; // the packet id
    }
    let Some((length, used)) = body.get(at..).and_then(varint) else {
        return false;
    };
    at += used;
    let Some(mut properties) = body.get(at..at.saturating_add(length)) else {
        return false;
    };
    // Each property: its identifier, then a value whose length the identifier sets.
    while let Some((&id, rest)) = properties.split_first() {
        let two_byte = |b: &[u8]| {
            b.get(..2)
                .map(|v| usize::from(u16::from_be_bytes([v[0], v[1]])))
        };
        // The identifiers a PUBLISH may carry (5.0, 3.3.2.3); any other is malformed.
        let value = match id {
            // Payload format indicator; message expiry interval.
            0x01 => Some(1),
            0x02 => Some(4),
            TOPIC_ALIAS => Some(2),
            // Content type, response topic, correlation data: a length, then its bytes.
            0x03 | 0x08 | 0x09 => two_byte(rest).map(|n| 2 + n),
            // Subscription identifier.
            0x0b => varint(rest).map(|(_, n)| n),
            // User property: a name and a value.
            0x26 => two_byte(rest).and_then(|k| {
                let v = rest.get(2 + k..).and_then(two_byte)?;
                Some(4 + k + v)
            }),
            _ => None,
        };
        let Some(value) = value.and_then(|n| rest.get(..n)) else {
            return false;
        };
        if id == TOPIC_ALIAS && value == [0, 0] {
            return true;
        }
        properties = &rest[value.len()..];
    }
    false
}

#[cfg(test)]
mod tests {
    use rmqtt_codec::v5;

    use super::*;

    fn codec() -> FrameCodec {
        FrameCodec {
            mqtt: MqttCodec::V5(v5::Codec::new(1 << 20, 1 << 20)),
        }
    }

    /// A 5.0 PUBLISH at QoS 1 to `topic` (packet id 9) with `properties`, payload "x".
    fn publish(topic: &str, properties: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&(topic.len() as u16).to_be_bytes());
        body.extend_from_slice(topic.as_bytes());
        body.extend_from_slice(&[0, 9, properties.len() as u8]);
        body.extend_from_slice(properties);
        body.push(b'x');
        let mut packet = vec![0x32, body.len() as u8];
        packet.extend(body);
        packet
    }

    fn alias_of(frame: Frame) -> Option<u16> {
        match frame {
            Frame::Packet(MqttPacket::V5(v5::Packet::Publish(p))) => {
                p.properties.and_then(|p| p.topic_alias).map(|a| a.get())
            }
            other => panic!("not a PUBLISH: {other:?}"),
        }
    }

    #[test]
    fn a_publish_with_alias_zero_is_told_apart_and_the_next_packet_read() {
        // A user property and a content type before the alias, to be stepped over.
        let mut src = BytesMut::new();
        src.extend_from_slice(&publish(
            "",
            &[
                0x26, 0, 1, b'k', 0, 2, b'v', b'w', 0x03, 0, 1, b't', 0x23, 0, 0,
            ],
        ));
        src.extend_from_slice(&publish("a", &[0x23, 0, 5]));
        let mut codec = codec();
        assert!(matches!(
            codec.decode(&mut src).unwrap(),
            Some(Frame::AliasZero)
        ));
        assert_eq!(alias_of(codec.decode(&mut src).unwrap().unwrap()), Some(5));
        assert!(src.is_empty());
    }

    #[test]
    fn a_packet_split_across_reads_is_read_once_whole() {
        let whole = publish("a/b", &[0x23, 0, 7]);
        let mut codec = codec();
        let mut src = BytesMut::new();
        for byte in &whole[..whole.len() - 1] {
            src.extend_from_slice(&[*byte]);
            assert!(codec.decode(&mut src).unwrap().is_none());
        }
        src.extend_from_slice(&whole[whole.len() - 1..]);
        assert_eq!(alias_of(codec.decode(&mut src).unwrap().unwrap()), Some(7));
    }

    #[test]
    fn garbage_is_refused_by_the_codec_and_never_panics() {
        // Every cut of a PUBLISH whose lengths lie, and bytes of no packet at all.
        let lying = [0x32, 0x08, 0xff, 0xff, b'a', 0, 9, 0x7f, 0x23, 0];
        for end in 0..=lying.len() {
            let mut src = BytesMut::from(&lying[..end]);
            let _ = codec().decode(&mut src);
        }
        let mut seed = 0x9e37_79b9_u32;
        for _ in 0..2_000 {
            let mut bytes = vec![0x32];
            for _ in 0..24 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                bytes.push(seed as u8);
            }
            bytes[1] &= 0x7f;
            let mut src = BytesMut::from(&bytes[..]);
            let _ = codec().decode(&mut src);
        }
    }
}

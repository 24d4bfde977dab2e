//! MQTT packets as a connection decodes them with `rmqtt-codec`: the first byte picks how
//! the rest is read — as a connection's first bytes (the protocol level read from the
//! CONNECT, then that level's codec, as `mqtt::connection` switches), or straight as 3.1.1
//! or 5.0 packets.

use bytes::BytesMut;
use rmqtt_codec::version::{ProtocolVersion, VersionCodec};
use rmqtt_codec::{MqttCodec, MqttPacket, v3, v5};
use tokio_util::codec::Decoder;

/// The node's default largest packet is larger; a small one also runs the size check.
const PACKET_BYTES_MAX: u32 = 64 * 1024;

pub fn mqtt_codec(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut input = BytesMut::from(rest);
    let mut codec = match mode % 3 {
        0 => {
            let mut version = MqttCodec::Version(VersionCodec);
            match version.decode(&mut input) {
                Ok(Some((MqttPacket::Version(ProtocolVersion::MQTT3), _))) => {
                    MqttCodec::V3(v3::Codec::new(PACKET_BYTES_MAX))
                }
                Ok(Some((MqttPacket::Version(ProtocolVersion::MQTT5), _))) => {
                    MqttCodec::V5(v5::Codec::new(PACKET_BYTES_MAX, PACKET_BYTES_MAX))
                }
                _ => return,
            }
        }
        1 => MqttCodec::V3(v3::Codec::new(PACKET_BYTES_MAX)),
        _ => MqttCodec::V5(v5::Codec::new(PACKET_BYTES_MAX, PACKET_BYTES_MAX)),
    };
    for _ in 0..=rest.len() {
        match codec.decode(&mut input) {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
}

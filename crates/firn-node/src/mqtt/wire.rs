//! MQTT 3.1.1 and 5.0 packets (decoded and encoded by `rmqtt-codec`) as the connection
//! speaks them: one set of types whatever the protocol level, turned into each level's
//! packets here and nowhere else.

use std::num::NonZeroU16;

use bytes::Bytes;
use bytestring::ByteString;
use rmqtt_codec::types::{Publish as WirePublish, QoS};
use rmqtt_codec::{MqttPacket, v3, v5};

use super::alias::TOPIC_ALIAS_MAX;

/// The protocol level a connection's CONNECT named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    V3,
    V5,
}

/// A CONNECT, as the connection needs it.
#[derive(Clone, Debug)]
pub struct Connect {
    pub client_id: String,
    pub clean: bool,
    pub keep_alive_s: u16,
    pub username: Option<String>,
    pub password: Option<Bytes>,
    /// 5.0's Session Expiry Interval, in seconds (3.1.1 has none: `None`).
    pub expiry_s: Option<u32>,
    /// The last will: published for the client if its connection ends without DISCONNECT.
    pub will: Option<Publish>,
    /// 5.0's Will Delay Interval, in seconds (0: none; 3.1.1 has none).
    pub will_delay_s: u32,
    /// 5.0's Topic Alias Maximum: how many aliases the client takes (0: none; 3.1.1 none).
    pub topic_alias_max: u16,
}

/// A PUBLISH either way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publish {
    pub topic: String,
    pub payload: Bytes,
    pub qos: u8,
    pub retain: bool,
    pub packet_id: Option<u16>,
}

/// What a client sends.
#[derive(Debug)]
pub enum In {
    Connect(Connect),
    /// A PUBLISH, and the Topic Alias it carries (5.0): its topic is empty when the alias
    /// stands for it.
    Publish {
        publish: Publish,
        topic_alias: Option<u16>,
    },
    PubAck(u16),
    /// QoS 2's PUBREL: the client releases a message it was told was received.
    PubRel(u16),
    Subscribe {
        packet_id: u16,
        filters: Vec<(String, u8)>,
    },
    Unsubscribe {
        packet_id: u16,
        filters: Vec<String>,
    },
    Ping,
    /// `with_will`: 5.0's reason "Disconnect with Will Message" (the will is published);
    /// `expiry_s`: 5.0's Session Expiry Interval, the session's from now on, if it says one.
    Disconnect {
        with_will: bool,
        expiry_s: Option<u32>,
    },
    /// A packet a client does not send to a server, or one Firn does not take (QoS 2's
    /// PUBREC and PUBCOMP, as deliveries go at QoS 1 at most; AUTH): the connection closes.
    Unexpected(&'static str),
}

/// Why a CONNECT is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    BadCredentials,
    NotAuthorized,
    IdentifierRejected,
    /// The node keeps as many sessions as it may, or could not read or write this one.
    Unavailable,
}

/// Why a PUBLISH, or a filter of a SUBSCRIBE, is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    NotAuthorized,
    TopicInvalid,
    QuotaExceeded,
    Unspecified,
}

/// Why the server closes a connection (told in 5.0's DISCONNECT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closing {
    /// A packet the protocol does not allow there.
    ProtocolError,
    /// A Topic Alias of 0, above the maximum, or not set (5.0, 3.3.2.3.4).
    TopicAliasInvalid,
    /// A CONNECT with its client id, here or on another node (5.0, 3.1.4-3).
    SessionTakenOver,
}

/// What the server sends.
#[derive(Debug)]
pub enum Out {
    /// Accepted (with the client id the server gave one that sent none), or refused; and
    /// the largest packet the server takes (told in 5.0).
    ConnAck {
        result: Result<Option<String>, Refused>,
        session_present: bool,
        packet_bytes_max: u32,
    },
    /// A delivery, and the Topic Alias it sets or uses (5.0; its topic is empty when the
    /// alias stands for it).
    Publish {
        publish: Publish,
        topic_alias: Option<u16>,
    },
    PubAck {
        packet_id: u16,
        refused: Option<Reason>,
    },
    /// QoS 2: received (and written), or refused with the reason (5.0).
    PubRec {
        packet_id: u16,
        refused: Option<Reason>,
    },
    /// QoS 2: released (`known`: the packet id was awaiting its PUBREL).
    PubComp {
        packet_id: u16,
        known: bool,
    },
    /// Each filter's granted QoS, or why it was refused.
    SubAck {
        packet_id: u16,
        granted: Vec<Result<u8, Reason>>,
    },
    UnsubAck {
        packet_id: u16,
        count: usize,
    },
    PingResp,
    /// 5.0 only: why the server closes the connection.
    Disconnect(Closing),
}

fn qos(q: QoS) -> u8 {
    q.value()
}

fn packet_id(id: NonZeroU16) -> u16 {
    id.get()
}

fn publish_of(p: WirePublish) -> Publish {
    Publish {
        topic: p.topic.to_string(),
        payload: p.payload,
        qos: qos(p.qos),
        retain: p.retain,
        packet_id: p.packet_id.map(packet_id),
    }
}

/// A last will, as the PUBLISH it becomes.
fn will(topic: ByteString, payload: Bytes, q: QoS, retain: bool) -> Publish {
    Publish {
        topic: topic.to_string(),
        payload,
        qos: qos(q),
        retain,
        packet_id: None,
    }
}

/// A decoded packet as [`In`].
pub fn incoming(packet: MqttPacket) -> In {
    match packet {
        MqttPacket::V3(p) => match p {
            v3::Packet::Connect(c) => In::Connect(Connect {
                client_id: c.client_id.to_string(),
                clean: c.clean_session,
                keep_alive_s: c.keep_alive,
                username: c.username.map(|u| u.to_string()),
                password: c.password,
                expiry_s: None,
                will_delay_s: 0,
                topic_alias_max: 0,
                will: c
                    .last_will
                    .map(|w| will(w.topic, w.message, w.qos, w.retain)),
            }),
            v3::Packet::Publish(p) => In::Publish {
                publish: publish_of(*p),
                topic_alias: None,
            },
            v3::Packet::PublishAck { packet_id: id } => In::PubAck(packet_id(id)),
            v3::Packet::PublishRelease { packet_id: id } => In::PubRel(packet_id(id)),
            v3::Packet::Subscribe {
                packet_id: id,
                topic_filters,
            } => In::Subscribe {
                packet_id: packet_id(id),
                filters: topic_filters
                    .into_iter()
                    .map(|(f, q)| (f.to_string(), qos(q)))
                    .collect(),
            },
            v3::Packet::Unsubscribe {
                packet_id: id,
                topic_filters,
            } => In::Unsubscribe {
                packet_id: packet_id(id),
                filters: topic_filters.into_iter().map(|f| f.to_string()).collect(),
            },
            v3::Packet::PingRequest => In::Ping,
            v3::Packet::Disconnect => In::Disconnect {
                with_will: false,
                expiry_s: None,
            },
            _ => In::Unexpected("a packet a server does not take"),
        },
        MqttPacket::V5(p) => match p {
            v5::Packet::Connect(c) => In::Connect(Connect {
                client_id: c.client_id.to_string(),
                clean: c.clean_start,
                keep_alive_s: c.keep_alive,
                username: c.username.map(|u| u.to_string()),
                password: c.password,
                expiry_s: Some(c.session_expiry_interval_secs),
                topic_alias_max: c.topic_alias_max,
                will_delay_s: c
                    .last_will
                    .as_ref()
                    .and_then(|w| w.will_delay_interval_sec)
                    .unwrap_or(0),
                will: c
                    .last_will
                    .map(|w| will(w.topic, w.message, w.qos, w.retain)),
            }),
            v5::Packet::Publish(p) => In::Publish {
                topic_alias: p
                    .properties
                    .as_ref()
                    .and_then(|props| props.topic_alias)
                    .map(NonZeroU16::get),
                publish: publish_of(*p),
            },
            v5::Packet::PublishAck(a) => In::PubAck(packet_id(a.packet_id)),
            v5::Packet::PublishRelease(r) => In::PubRel(packet_id(r.packet_id)),
            v5::Packet::Subscribe(s) => In::Subscribe {
                packet_id: packet_id(s.packet_id),
                filters: s
                    .topic_filters
                    .into_iter()
                    .map(|(f, o)| (f.to_string(), qos(o.qos)))
                    .collect(),
            },
            v5::Packet::Unsubscribe(u) => In::Unsubscribe {
                packet_id: packet_id(u.packet_id),
                filters: u.topic_filters.into_iter().map(|f| f.to_string()).collect(),
            },
            v5::Packet::PingRequest => In::Ping,
            v5::Packet::Disconnect(d) => In::Disconnect {
                with_will: d.reason_code == v5::DisconnectReasonCode::DisconnectWithWillMessage,
                expiry_s: d.session_expiry_interval_secs,
            },
            _ => In::Unexpected("a packet a server does not take (AUTH is not supported)"),
        },
        MqttPacket::Version(_) => In::Unexpected("a second protocol negotiation"),
    }
}

fn id(packet_id: u16) -> NonZeroU16 {
    NonZeroU16::new(packet_id).unwrap_or(NonZeroU16::MIN)
}

fn qos_of(q: u8) -> QoS {
    match q {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

fn wire_publish(p: Publish, topic_alias: Option<u16>) -> WirePublish {
    WirePublish {
        dup: false,
        retain: p.retain,
        qos: qos_of(p.qos),
        topic: ByteString::from(p.topic),
        packet_id: p.packet_id.map(id),
        payload: p.payload,
        properties: topic_alias.map(|alias| v5::PublishProperties {
            topic_alias: NonZeroU16::new(alias),
            ..v5::PublishProperties::default()
        }),
    }
}

/// A 5.0 PUBACK's or PUBREC's reason code.
fn ack_reason(refused: Option<Reason>) -> v5::PublishAckReason {
    match refused {
        None => v5::PublishAckReason::Success,
        Some(Reason::NotAuthorized) => v5::PublishAckReason::NotAuthorized,
        Some(Reason::TopicInvalid) => v5::PublishAckReason::TopicNameInvalid,
        Some(Reason::QuotaExceeded) => v5::PublishAckReason::QuotaExceeded,
        Some(Reason::Unspecified) => v5::PublishAckReason::UnspecifiedError,
    }
}

/// `out` as a packet of protocol level `level` (`None`: nothing to send at that level).
pub fn outgoing(level: Level, out: Out) -> Option<MqttPacket> {
    Some(match level {
        Level::V3 => MqttPacket::V3(match out {
            Out::ConnAck {
                result,
                session_present,
                ..
            } => v3::Packet::ConnectAck(v3::ConnectAck {
                session_present,
                return_code: match result {
                    Ok(_) => v3::ConnectAckReason::ConnectionAccepted,
                    Err(Refused::BadCredentials) => v3::ConnectAckReason::BadUserNameOrPassword,
                    Err(Refused::NotAuthorized) => v3::ConnectAckReason::NotAuthorized,
                    Err(Refused::IdentifierRejected) => v3::ConnectAckReason::IdentifierRejected,
                    Err(Refused::Unavailable) => v3::ConnectAckReason::ServiceUnavailable,
                },
            }),
            // 3.1.1 has no aliases.
            Out::Publish { publish, .. } => {
                v3::Packet::Publish(Box::new(wire_publish(publish, None)))
            }
            // 3.1.1 has no negative PUBACK: a refused PUBLISH closes the connection instead.
            Out::PubAck { packet_id, .. } => v3::Packet::PublishAck {
                packet_id: id(packet_id),
            },
            Out::PubRec { packet_id, .. } => v3::Packet::PublishReceived {
                packet_id: id(packet_id),
            },
            Out::PubComp { packet_id, .. } => v3::Packet::PublishComplete {
                packet_id: id(packet_id),
            },
            Out::SubAck { packet_id, granted } => v3::Packet::SubscribeAck {
                packet_id: id(packet_id),
                status: granted
                    .into_iter()
                    .map(|g| match g {
                        Ok(q) => v3::SubscribeReturnCode::Success(qos_of(q)),
                        Err(_) => v3::SubscribeReturnCode::Failure,
                    })
                    .collect(),
            },
            Out::UnsubAck { packet_id, .. } => v3::Packet::UnsubscribeAck {
                packet_id: id(packet_id),
            },
            Out::PingResp => v3::Packet::PingResponse,
            Out::Disconnect(_) => return None,
        }),
        Level::V5 => MqttPacket::V5(match out {
            Out::ConnAck {
                result,
                session_present,
                packet_bytes_max,
            } => v5::Packet::ConnectAck(Box::new(v5::ConnectAck {
                session_present,
                max_packet_size: Some(packet_bytes_max),
                topic_alias_max: TOPIC_ALIAS_MAX,
                assigned_client_id: result.clone().ok().flatten().map(ByteString::from),
                reason_code: match result {
                    Ok(_) => v5::ConnectAckReason::Success,
                    Err(Refused::BadCredentials) => v5::ConnectAckReason::BadUserNameOrPassword,
                    Err(Refused::NotAuthorized) => v5::ConnectAckReason::NotAuthorized,
                    Err(Refused::IdentifierRejected) => {
                        v5::ConnectAckReason::ClientIdentifierNotValid
                    }
                    Err(Refused::Unavailable) => v5::ConnectAckReason::ServerUnavailable,
                },
                max_qos: QoS::ExactlyOnce,
                subscription_identifiers_available: false,
                shared_subscription_available: false,
                ..Default::default()
            })),
            Out::Publish {
                publish,
                topic_alias,
            } => v5::Packet::Publish(Box::new(wire_publish(publish, topic_alias))),
            Out::PubAck { packet_id, refused } => v5::Packet::PublishAck(v5::PublishAck {
                packet_id: id(packet_id),
                reason_code: ack_reason(refused),
                ..Default::default()
            }),
            Out::PubRec { packet_id, refused } => v5::Packet::PublishReceived(v5::PublishAck {
                packet_id: id(packet_id),
                reason_code: ack_reason(refused),
                ..Default::default()
            }),
            Out::PubComp { packet_id, known } => v5::Packet::PublishComplete(v5::PublishAck2 {
                packet_id: id(packet_id),
                reason_code: if known {
                    v5::PublishAck2Reason::Success
                } else {
                    v5::PublishAck2Reason::PacketIdNotFound
                },
                ..Default::default()
            }),
            Out::SubAck { packet_id, granted } => v5::Packet::SubscribeAck(v5::SubscribeAck {
                packet_id: id(packet_id),
                properties: Default::default(),
                reason_string: None,
                status: granted
                    .into_iter()
                    .map(|g| match g {
                        Ok(0) => v5::SubscribeAckReason::GrantedQos0,
                        Ok(_) => v5::SubscribeAckReason::GrantedQos1,
                        Err(Reason::NotAuthorized) => v5::SubscribeAckReason::NotAuthorized,
                        Err(Reason::TopicInvalid) => v5::SubscribeAckReason::TopicFilterInvalid,
                        Err(Reason::QuotaExceeded) => v5::SubscribeAckReason::QuotaExceeded,
                        Err(Reason::Unspecified) => v5::SubscribeAckReason::UnspecifiedError,
                    })
                    .collect(),
            }),
            Out::UnsubAck { packet_id, count } => v5::Packet::UnsubscribeAck(v5::UnsubscribeAck {
                packet_id: id(packet_id),
                properties: Default::default(),
                reason_string: None,
                status: vec![v5::UnsubscribeAckReason::Success; count],
            }),
            Out::PingResp => v5::Packet::PingResponse,
            Out::Disconnect(closing) => v5::Packet::Disconnect(v5::Disconnect {
                reason_code: match closing {
                    Closing::ProtocolError => v5::DisconnectReasonCode::ProtocolError,
                    Closing::TopicAliasInvalid => v5::DisconnectReasonCode::TopicAliasInvalid,
                    Closing::SessionTakenOver => v5::DisconnectReasonCode::SessionTakenOver,
                },
                ..Default::default()
            }),
        }),
    })
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use tokio_util::codec::Decoder;

    use super::*;

    fn decoded_v5(bytes: &[u8]) -> In {
        let mut codec = v5::Codec::new(0, 0);
        let (packet, _) = codec
            .decode(&mut BytesMut::from(bytes))
            .unwrap()
            .expect("a whole packet");
        incoming(MqttPacket::V5(packet))
    }

    #[test]
    fn a_v5_will_delay_and_a_disconnect_with_will_message_are_read() {
        // CONNECT: clean start, client id "c", a will to "w" (payload "x") with Will Delay
        // Interval 30 s.
        let connect = decoded_v5(
            b"\x10\x1a\x00\x04MQTT\x05\x06\x00\x3c\x00\x00\x01c\
              \x05\x18\x00\x00\x00\x1e\x00\x01w\x00\x01x",
        );
        let In::Connect(c) = connect else {
            panic!("not a CONNECT: {connect:?}");
        };
        assert_eq!(c.will_delay_s, 30);
        assert_eq!(c.will.map(|w| w.topic).as_deref(), Some("w"));
        // DISCONNECT 0x04 "Disconnect with Will Message", and a plain one.
        assert!(matches!(
            decoded_v5(b"\xe0\x01\x04"),
            In::Disconnect {
                with_will: true,
                expiry_s: None
            }
        ));
        assert!(matches!(
            decoded_v5(b"\xe0\x00"),
            In::Disconnect {
                with_will: false,
                expiry_s: None
            }
        ));
        // A plain one with Session Expiry Interval 30 s.
        assert!(matches!(
            decoded_v5(b"\xe0\x07\x00\x05\x11\x00\x00\x00\x1e"),
            In::Disconnect {
                with_will: false,
                expiry_s: Some(30)
            }
        ));
    }
}

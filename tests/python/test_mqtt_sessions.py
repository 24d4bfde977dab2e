"""Persistent MQTT sessions against a running Firn node through paho-mqtt, unchanged: a QoS 1
subscriber that disconnects misses nothing — on reconnecting it is told its session is
present and gets every message published while it was away, in order per topic; messages it
received and never acknowledged come again; a clean CONNECT drops the session; a 5.0
session ends after its expiry interval.

    python3 tests/python/test_mqtt_sessions.py MQTT_PORT

Exits non-zero on the first failed check. Topics and client ids carry a random prefix.
"""

import os
import queue
import sys
import time

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

TOPICS = ("a/temp", "b/temp", "c/alarm")
PER_TOPIC = 60


class Sub:
    """A subscriber: its messages and the session-present flag of each CONNACK."""

    def __init__(self, port, name, protocol=mqtt.MQTTv311, manual_ack=False, expiry_s=None, clean=False):
        self.messages = queue.Queue()
        self.connacks = queue.Queue()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name, protocol=protocol,
                             **({} if protocol == mqtt.MQTTv5 else {"clean_session": clean}))
        if manual_ack:
            self.c.manual_ack_set(True)
        self.c.on_message = lambda _c, _u, m: self.messages.put(m)
        self.c.on_connect = lambda _c, _u, flags, rc, _p: self.connacks.put((flags.session_present, rc))
        subscribed = queue.Queue()
        self.subscribed = subscribed
        self.c.on_subscribe = lambda *a: subscribed.put(a)
        if protocol == mqtt.MQTTv5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = expiry_s or 0
            self.c.connect("127.0.0.1", port, keepalive=30, clean_start=clean, properties=props)
        else:
            self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()

    def session_present(self):
        present, rc = self.connacks.get(timeout=10)
        assert not rc.is_failure, rc
        return present

    def subscribe(self, topic):
        self.c.subscribe(topic, qos=1)
        self.subscribed.get(timeout=10)

    def take(self, n, timeout=20):
        return [self.messages.get(timeout=timeout) for _ in range(n)]

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def publish_all(port, base, name):
    """Publishes PER_TOPIC QoS 1 messages to each topic, interleaved, each acknowledged."""
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name)
    pub.connect("127.0.0.1", port, keepalive=30)
    pub.loop_start()
    sent = {t: [] for t in TOPICS}
    infos = []
    for i in range(PER_TOPIC):
        for t in TOPICS:
            payload = f"{t} {i}"
            infos.append(pub.publish(f"{base}/{t}", payload, qos=1))
            sent[t].append(payload)
    for info in infos:
        info.wait_for_publish(timeout=20)
        assert info.is_published()
    pub.disconnect()
    pub.loop_stop()
    return sent


def in_order_per_topic(base, messages, sent):
    """Every sent message arrived, and each topic's arrived in the order sent (a message
    given again, as QoS 1 allows, may repeat one already seen)."""
    got = {t: [] for t in TOPICS}
    for m in messages:
        t = m.topic[len(base) + 1:]
        payload = m.payload.decode()
        if payload not in got[t]:
            got[t].append(payload)
    assert got == sent, {t: (len(got[t]), got[t][:3]) for t in TOPICS}


def main():
    port = int(sys.argv[1])
    base = f"sessions-{os.urandom(4).hex()}"
    name = f"{base}-sub"

    # A new persistent session: not present yet; it subscribes, then goes away.
    sub = Sub(port, name)
    assert sub.session_present() is False
    sub.subscribe(f"{base}/+/temp")
    sub.subscribe(f"{base}/c/#")
    sub.close()

    # Published while it is away, every one acknowledged.
    sent = publish_all(port, base, f"{base}-pub")

    # Back: its session is there, with everything it missed, in order per topic.
    sub = Sub(port, name)
    assert sub.session_present() is True
    in_order_per_topic(base, sub.take(PER_TOPIC * len(TOPICS)), sent)
    time.sleep(0.5)
    assert sub.messages.empty(), "more messages than were published"

    # Live messages come through the session too.
    sent = publish_all(port, base, f"{base}-pub2")
    in_order_per_topic(base, sub.take(PER_TOPIC * len(TOPICS)), sent)
    sub.close()

    # Received but never acknowledged: given again on the next connection.
    sub = Sub(port, name, manual_ack=True)
    assert sub.session_present() is True
    sent = publish_all(port, base, f"{base}-pub3")
    first = sub.take(10)
    sub.close()
    sub = Sub(port, name)
    assert sub.session_present() is True
    again = sub.take(PER_TOPIC * len(TOPICS))
    in_order_per_topic(base, again, sent)
    assert [m.payload for m in again[:10]] == [m.payload for m in first], "unacknowledged ones first"
    sub.close()

    # A clean CONNECT drops the session: nothing is kept for the next one.
    clean = Sub(port, name, clean=True)
    assert clean.session_present() is False
    clean.close()
    publish_all(port, base, f"{base}-pub4")
    sub = Sub(port, name)
    assert sub.session_present() is False
    time.sleep(1)
    assert sub.messages.empty(), "a dropped session got messages"
    sub.close()
    Sub(port, name, clean=True).close()

    # 5.0: a session with a 2 s expiry interval is there 0.5 s after, gone 4 s after.
    v5 = f"{base}-v5"
    sub = Sub(port, v5, protocol=mqtt.MQTTv5, expiry_s=2)
    assert sub.session_present() is False
    sub.subscribe(f"{base}/a/temp")
    sub.close()
    time.sleep(0.5)
    sub = Sub(port, v5, protocol=mqtt.MQTTv5, expiry_s=2)
    assert sub.session_present() is True
    sub.close()
    time.sleep(4)
    sub = Sub(port, v5, protocol=mqtt.MQTTv5, expiry_s=2)
    assert sub.session_present() is False, "an expired session was resumed"
    sub.close()
    print("test_mqtt_sessions: ok")


if __name__ == "__main__":
    main()

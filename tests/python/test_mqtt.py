"""The MQTT face against a running Firn node through paho-mqtt, unchanged (MQTT 3.1.1 and
5.0): QoS 1 publishes acknowledged once written (a Redis GET right after the PUBACK reads
them), retained messages as the keys' versions, a wildcard subscriber receiving every
message in order per topic, and Redis PUBLISH reaching it.

    python3 tests/python/test_mqtt.py RESP_PORT MQTT_PORT

Exits non-zero on the first failed check. Topics carry a random prefix.
"""

import os
import queue
import sys
import time

import paho.mqtt.client as mqtt
import redis


def client(port, protocol, name):
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name, protocol=protocol)
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    return c


def main():
    resp_port, mqtt_port = int(sys.argv[1]), int(sys.argv[2])
    r = redis.Redis(port=resp_port, decode_responses=True, socket_timeout=20)
    base = f"pytest-{os.urandom(4).hex()}"

    received = queue.Queue()
    sub = client(mqtt_port, mqtt.MQTTv311, f"{base}-sub")
    sub.on_message = lambda _c, _u, m: received.put((m.topic, m.payload.decode(), m.retain))
    subscribed = queue.Queue()
    sub.on_subscribe = lambda *a: subscribed.put(a)
    sub.subscribe(f"{base}/+/temp", qos=1)
    subscribed.get(timeout=10)

    for protocol in (mqtt.MQTTv311, mqtt.MQTTv5):
        pub = client(mqtt_port, protocol, f"{base}-pub-{protocol}")
        # Retained, QoS 1: readable through Redis as soon as it is acknowledged.
        for i in range(20):
            info = pub.publish(f"{base}/{protocol}/temp", f"{i}", qos=1, retain=True)
            info.wait_for_publish(timeout=10)
            assert info.is_published()
            assert r.get(f"mqtt/{base}/{protocol}/temp") == f"{i}", i
        # Not retained: delivered, and in the log.
        for i in range(20):
            pub.publish(f"{base}/{protocol}/temp", f"live {i}", qos=1).wait_for_publish(timeout=10)
        pub.disconnect()
        pub.loop_stop()
        got = [received.get(timeout=10) for _ in range(40)]
        assert [g[1] for g in got] == [f"{i}" for i in range(20)] + [f"live {i}" for i in range(20)], got
        assert all(t == f"{base}/{protocol}/temp" and not retain for t, _, retain in got), got
        history = r.execute_command("FIRN.HISTORY", f"mqtt/{base}/{protocol}/temp", "LIMIT", "100")
        assert len(history) == 20, len(history)

    # Redis PUBLISH reaches the MQTT subscriber.
    assert r.publish(f"mqtt/{base}/redis/temp", "hello") == 1
    assert received.get(timeout=10)[:2] == (f"{base}/redis/temp", "hello")

    # A new subscriber gets the retained messages first, flagged so.
    late = queue.Queue()
    sub2 = client(mqtt_port, mqtt.MQTTv5, f"{base}-sub2")
    sub2.on_message = lambda _c, _u, m: late.put((m.topic, m.payload.decode(), m.retain))
    sub2.subscribe(f"{base}/#", qos=1)
    got = sorted(late.get(timeout=10) for _ in range(2))
    assert got == [(f"{base}/{mqtt.MQTTv311}/temp", "19", True), (f"{base}/{mqtt.MQTTv5}/temp", "19", True)], got
    for c in (sub, sub2):
        c.disconnect()
        c.loop_stop()
    print("test_mqtt: ok")


if __name__ == "__main__":
    main()

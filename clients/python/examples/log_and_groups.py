"""The shared log (tags, read back in order) and a consumer group over a stream.

    python3 log_and_groups.py [RESP_ADDR [HTTP_ADDR]]
"""

import os
import sys
import uuid

import firn

addr = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FIRN_ADDR", "127.0.0.1:7379")
http_addr = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FIRN_HTTP_ADDR", "127.0.0.1:7380")
run = uuid.uuid4().hex[:8]

with firn.Client(addr, http_addr) as c:
    orders = f"example/{run}/orders"
    c.log.append(orders, "order 19", tags=["eu", "paid"])
    c.log.append(orders, "order 20", tags=["eu"])
    for record in c.log.range(orders, "eu"):
        print("log:", record.seq, [t.decode() for t in record.tags], record.value.decode())

    jobs = f"example/{run}/jobs"
    c.streams.add(jobs, {"item": "book"})
    c.streams.add(jobs, {"item": "lamp"})
    billing = c.streams.group(jobs, "billing")
    billing.create(start="0")
    for entry in billing.consume("worker-1", count=2, idle_timeout_s=10):
        print("consumed:", entry.id, entry.as_dict()[b"item"].decode())
        billing.ack(entry.id)
    print("pending after acks:", billing.pending().count)

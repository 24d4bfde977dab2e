"""One consistent cut across shards: several keys, or a whole prefix, as of one time.

    python3 snapshot.py [RESP_ADDR [HTTP_ADDR]]
"""

import os
import sys
import uuid

import firn

addr = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FIRN_ADDR", "127.0.0.1:7379")
http_addr = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FIRN_HTTP_ADDR", "127.0.0.1:7380")
room = f"example/{uuid.uuid4().hex[:8]}/room/"

with firn.Client(addr, http_addr) as c:
    c.put(room + "1", "on")
    c.put(room + "2", "off")
    cut = c.snapshot([room + "1", room + "2"])
    print("at", cut.at, cut.at.datetime.isoformat())
    for key, v in cut.values.items():
        print(key.decode(), v.text if v else None)

    c.put(room + "1", "off")
    print("same cut again:", c.snapshot([room + "1"], at=cut.at)[(room + "1").encode()].text)
    everything = c.snapshot_prefix(room)
    print("prefix now:", {k.decode(): v.text for k, v in everything.values.items() if v})

"""Watch a prefix: replay its versions from version 1, then follow commits as they happen.

    python3 watch.py [RESP_ADDR [HTTP_ADDR]]
"""

import os
import sys
import threading
import uuid

import firn

addr = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FIRN_ADDR", "127.0.0.1:7379")
http_addr = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FIRN_HTTP_ADDR", "127.0.0.1:7380")
prefix = f"example/{uuid.uuid4().hex[:8]}/sensor/"

with firn.Client(addr, http_addr) as c:
    c.put(prefix + "1", "20.0")

    def writer():
        with firn.Client(addr, http_addr) as w:
            w.put(prefix + "1", "20.5")
            w.delete(prefix + "1")

    with c.watch(prefix, prefix=True, from_version=1, idle_timeout_s=10) as watch:
        threading.Thread(target=writer).start()
        for event in watch.take(3):
            print(event.kind, event.key.decode(), "v%d" % event.version, event.text)

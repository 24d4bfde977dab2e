"""Versions, reads in the past, event time and history.

    python3 quickstart.py [RESP_ADDR [HTTP_ADDR]]     (or FIRN_ADDR / FIRN_HTTP_ADDR)
"""

import os
import sys
import uuid
from datetime import datetime, timedelta, timezone

import firn

addr = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FIRN_ADDR", "127.0.0.1:7379")
http_addr = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FIRN_HTTP_ADDR", "127.0.0.1:7380")
key = f"example/{uuid.uuid4().hex[:8]}/sensor/7"

with firn.Client(addr, http_addr) as c:
    first = c.put(key, "21.5", event_time=datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc))
    second = c.put(key, "22.0", event_time=datetime(2026, 11, 22, 10, 5, tzinfo=timezone.utc))
    print("wrote versions", first.version, second.version)

    now = c.get(key)
    print("now:", now.text, "version", now.version, "committed", now.commit_time.isoformat())
    print("version 1:", c.get(key, version=1).text)
    print("as of the first commit:", c.get(key, as_of=first.commit_ts).text)
    at_10_03 = c.get(key, event_time=datetime(2026, 11, 22, 10, 3, tzinfo=timezone.utc))
    print("by event time 10:03:", at_10_03.text)

    try:
        c.put(key, "23.1", if_version=1)
    except firn.ConflictError as e:
        print("conflict: the current version is", e.current_version)

    c.delete(key)
    for v in c.history(key):
        print("history:", v.version, "deleted" if v.deleted else v.text)

"""Reads from the node's shared-memory region (the node must run on this host), falling
back to the node when the region cannot answer.

    python3 local_reads.py [RESP_ADDR [HTTP_ADDR]]
"""

import os
import sys
import uuid

import firn
from firn.local import Linearizable, Remote, Stale

addr = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FIRN_ADDR", "127.0.0.1:7379")
http_addr = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FIRN_HTTP_ADDR", "127.0.0.1:7380")
prefix = f"example/{uuid.uuid4().hex[:8]}/local/"

with firn.Client(addr, http_addr) as c:
    c.create_keyspace(prefix, local=True)  # publish this prefix's newest values in the region
    c.put(prefix + "sensor/1", "21.5")
    c.put(f"example/{uuid.uuid4().hex[:8]}/not-local", "x")
    with c.local() as local:
        for key in (prefix + "sensor/1", prefix + "sensor/2"):
            read = local.get(key)
            if isinstance(read.bound, Linearizable):
                how = "from the region, linearizable (leader lease)"
            elif isinstance(read.bound, Stale):
                how = f"from the region, at most {read.bound.staleness_us_max} us stale"
            else:
                assert isinstance(read.bound, Remote)
                how = f"from the node ({read.bound.reason.value})"
            print(key.rsplit("/", 1)[-1], read.value, "version", read.version, how)

"""Causality tokens: a second client (another process, another node) that is handed the
first client's token reads at least what the first one wrote.

    python3 tokens.py [RESP_ADDR [HTTP_ADDR]]
"""

import os
import sys
import uuid

import firn

addr = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FIRN_ADDR", "127.0.0.1:7379")
http_addr = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FIRN_HTTP_ADDR", "127.0.0.1:7380")
key = f"example/{uuid.uuid4().hex[:8]}/cart"

with firn.Client(addr, http_addr) as alice:
    alice.put(key, "3 items")
    token = str(alice.token)  # send it along with the request, a message, a cookie
    print("alice's token:", token)

with firn.Client(addr, http_addr) as bob:
    bob.after(token)
    print("bob reads:", bob.get(key, consistency="local").text)
    print("bob's token is at least alice's:", bob.token >= firn.CommitTs.parse(token))

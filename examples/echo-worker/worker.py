#!/usr/bin/env python3
"""An echo worker for a Firn service, with redis-py unchanged: it takes requests with
FIRN.SERVE and answers each with FIRN.REPLY (the payload, upper-cased with --upper).

    python3 examples/echo-worker/worker.py --port 7379 --service echo
    redis-cli -p 7379 FIRN.REQUEST echo hello      # -> "hello"
    firn request echo hello                         # the same through the CLI

Run several: each connection is its own worker, and the service's group deals requests to
them (POLICY first by default: the first free worker takes a request; roundrobin deals
in turn; hrw keeps a request KEY on one worker).
"""

import argparse
import sys

import redis


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7379)
    p.add_argument("--service", default="echo")
    p.add_argument("--policy", choices=["first", "roundrobin", "hrw"], default="first")
    p.add_argument("--upper", action="store_true", help="answer the payload upper-cased")
    p.add_argument("--count", type=int, default=0, help="stop after this many requests (0: never)")
    args = p.parse_args()

    r = redis.Redis(host=args.host, port=args.port, socket_timeout=None)
    served = 0
    while args.count == 0 or served < args.count:
        # BLOCK 1000: wake every second, so Ctrl-C is noticed.
        got = r.execute_command("FIRN.SERVE", args.service, "POLICY", args.policy, "BLOCK", 1000)
        if got is None:
            continue
        request_id, payload, _key = got
        answer = payload.upper() if args.upper else payload
        r.execute_command("FIRN.REPLY", request_id, answer)
        served += 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)

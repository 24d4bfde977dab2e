"""What every redis-py test file here shares: `python3 tests/python/test_x.py PORT` runs its
`check_protocol(port, protocol)` over RESP2, then RESP3, against the node at PORT."""

import sys


def run(name, check_protocol):
    """Runs `check_protocol` for RESP2 and RESP3; the exit status (2: no PORT given)."""
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} PORT", file=sys.stderr)
        return 2
    port = int(sys.argv[1])
    for protocol in (2, 3):
        check_protocol(port, protocol)
        print(f"{name}: RESP{protocol} ok")
    return 0

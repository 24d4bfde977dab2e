"""Schemathesis hooks for tests/openapi/check: what a generated request is changed into before
it is sent.

Waits: the document states the real ranges (`block_ms` up to an hour, `timeout_ms` up to an
hour with 5 s by default); a generated request that asked for them would hold the run that
long. Each case is sent with its wait cut to WAIT_MS_MAX, so every operation is still called,
just briefly.

`Firn-After`: every operation takes it, and a malformed one is refused by the same middleware
before any handler runs, so invalid cases spent on it (most of them, left alone) test that one
refusal again and again instead of the operation's own parameters. A malformed `Firn-After` is
sent only to the operations in REFUSED_TOKEN_OPERATIONS; elsewhere it is left out.
"""

import re

import schemathesis

# Long enough to exercise the wait, short enough for 20 cases per operation.
WAIT_MS_MAX = 50


def _bounded(value):
    """`value` cut to WAIT_MS_MAX when it is a whole number (anything else is sent as it is)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value > WAIT_MS_MAX:
        return WAIT_MS_MAX
    if isinstance(value, str) and value.isdigit() and int(value) > WAIT_MS_MAX:
        return str(WAIT_MS_MAX)
    return value


# Where the middleware's refusal of a malformed `Firn-After` is tested (one operation is enough:
# the refusal comes before any handler).
REFUSED_TOKEN_OPERATIONS = {"health"}
TOKEN = re.compile(r"[0-9]+-[0-9]+")


@schemathesis.hook
def before_call(context, case, kwargs):
    operation_id = case.operation.definition.raw.get("operationId")
    token = (case.headers or {}).get("Firn-After")
    if (
        token is not None
        and operation_id not in REFUSED_TOKEN_OPERATIONS
        and not (isinstance(token, str) and TOKEN.fullmatch(token))
    ):
        del case.headers["Firn-After"]
    if operation_id == "logRead" and case.query and "block_ms" in case.query:
        case.query["block_ms"] = _bounded(case.query["block_ms"])
    elif operation_id == "readGroup" and isinstance(case.body, dict) and "block_ms" in case.body:
        case.body["block_ms"] = _bounded(case.body["block_ms"])
    elif operation_id == "serviceRequest":
        # No worker serves the generated services, so every request waits its whole timeout:
        # left out it is 5 s.
        if case.query is None:
            case.query = {}
        case.query["timeout_ms"] = _bounded(case.query.get("timeout_ms", WAIT_MS_MAX))

// A module for the SDK's tests (host.test.mjs): its first argument names an SDK call, the
// rest are that call's; it replies what the call answered, as text.

import {
  FirnError,
  RunKind,
  argStrings,
  args,
  del,
  get,
  getAtString,
  getVersion,
  incr,
  inputVersion,
  keys,
  kind,
  log,
  logAppend,
  logRead,
  publish,
  put,
  reply,
  scan,
  stampUs,
  text,
  xadd,
} from "../assembly/index";

export function run(): i32 {
  const a = argStrings();
  const op = a[0];
  if (op == "input") {
    reply(`${kind() == RunKind.Put ? "put" : "other"} ${keys().join(",")} ${a.length} ${stampUs()} ${inputVersion()}`);
  } else if (op == "get") {
    const r = get(a[1]);
    const v = r.value;
    reply(r.error !== null ? failed(r.error) : v === null ? "absent" : "value " + v.length.toString() + " " + text(v));
  } else if (op == "get_version") {
    const r = getVersion(a[1], U64.parseInt(a[2]));
    const v = r.value;
    reply(r.error !== null ? failed(r.error) : v === null ? "absent" : "value " + text(v));
  } else if (op == "get_at") {
    const r = getAtString(a[1], I64.parseInt(a[2]));
    const v = r.value;
    reply(r.error !== null ? failed(r.error) : v === null ? "absent" : "value " + v);
  } else if (op == "scan") {
    const r = scan(a[1]);
    reply(r.error !== null ? failed(r.error) : r.value.join("\n"));
  } else if (op == "log_read") {
    const r = logRead(a[1], a[2], a[3]);
    const lines = new Array<string>();
    for (let i = 0; i < r.value.length; i++) lines.push(r.value[i].id + "=" + text(r.value[i].payload));
    reply(r.error !== null ? failed(r.error) : lines.join("\n"));
  } else if (op == "put") {
    written(put(a[1], a[2]));
  } else if (op == "put_bytes") {
    written(put(a[1], args()[2]));
  } else if (op == "del") {
    written(del(a[1]));
  } else if (op == "incr") {
    written(incr(a[1], I64.parseInt(a[2])));
  } else if (op == "xadd") {
    written(xadd(a[1], a.slice(2)));
  } else if (op == "log_append") {
    written(logAppend(a[1], a.slice(2, a.length - 1), a[a.length - 1]));
  } else if (op == "publish") {
    written(publish(a[1], a[2]));
  } else if (op == "abort") {
    assert(false, "the probe aborts");
  } else if (op == "random") {
    reply(Math.random().toString());
  } else {
    log("probe: unknown op " + op);
    return 1;
  }
  return 0;
}

function failed(e: FirnError | null): string {
  if (e === null) return "no error";
  return "error " + e.code.toString() + " " + e.toString();
}

function written(e: FirnError | null): void {
  reply(e === null ? "ok" : failed(e));
}

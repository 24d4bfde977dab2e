// The SDK against a host that answers as Firn's does (docs/functions.md, "The host ABI"):
// tests/probe.ts, built into build/probe.wasm by `npm test`, runs one SDK call per run.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import test from "node:test";

const module = new WebAssembly.Module(readFileSync(new URL("../build/probe.wasm", import.meta.url)));
const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();
const bytes = (v) => (typeof v === "string" ? utf8.encode(v) : Uint8Array.from(v));

/** Runs the probe once, as Firn would with this input, and answers what the run did. */
function run({ kind = 0, keys = [], args = [], stampUs = 0n, inputVersion = 0n, data = new Map(), host = {} }) {
  const state = { code: null, reply: null, log: [], writes: [], calls: {}, trap: null };
  let memory;
  let collect = () => {};
  // A full collection before every read of the module's memory: what the SDK passes must
  // still be reachable while the host reads it.
  const guest = (p, l) => {
    collect();
    return new Uint8Array(memory.buffer, p, l).slice();
  };
  const text = (p, l) => fromUtf8.decode(guest(p, l));
  // A read's answer: its length, the bytes copied only when they fit.
  const answer = (value, buf, cap) => {
    if (value.length <= cap) new Uint8Array(memory.buffer, buf, value.length).set(value);
    return value.length;
  };
  const counted = (name, f) => (...a) => {
    state.calls[name] = (state.calls[name] ?? 0) + 1;
    return f(...a);
  };
  const keyBytes = keys.map(bytes);
  const argBytes = args.map(bytes);
  const value = (k) => (data.has(k) ? bytes(data.get(k)) : null);
  const write = (op, code) => (...a) => {
    state.writes.push([op, ...a]);
    return code ?? 0;
  };
  const firn = {
    kind: () => kind,
    key_count: () => keyBytes.length,
    key: (i, buf, cap) => (i < keyBytes.length ? answer(keyBytes[i], buf, cap) : -1),
    arg_count: () => argBytes.length,
    arg: (i, buf, cap) => (i < argBytes.length ? answer(argBytes[i], buf, cap) : -1),
    stamp_us: () => stampUs,
    input_version: () => inputVersion,
    get: (kp, kl, buf, cap) => {
      const v = value(text(kp, kl));
      return v === null ? -1n : BigInt(answer(v, buf, cap));
    },
    get_version: (kp, kl, version, buf, cap) => {
      const v = value(`${text(kp, kl)}@${version}`);
      return v === null ? -1n : BigInt(answer(v, buf, cap));
    },
    get_at: (kp, kl, at, buf, cap) => {
      const v = value(`${text(kp, kl)}@t${at}`);
      return v === null ? -1n : BigInt(answer(v, buf, cap));
    },
    scan: (pp, pl, ap, al, buf, cap) => {
      const prefix = text(pp, pl);
      const after = text(ap, al);
      const page = [];
      let size = 0;
      for (const k of [...data.keys()].sort()) {
        if (!k.startsWith(prefix) || k <= after || page.length === 1000) continue;
        const kb = bytes(k);
        if (size + 4 + kb.length > cap) break;
        page.push(kb);
        size += 4 + kb.length;
      }
      const more = [...data.keys()].some((k) => k.startsWith(prefix) && k > after);
      if (page.length === 0) return more ? -2n : 0n;
      const view = new DataView(memory.buffer, buf, size);
      let at = 0;
      for (const kb of page) {
        view.setUint32(at, kb.length, true);
        new Uint8Array(memory.buffer, buf + at + 4, kb.length).set(kb);
        at += 4 + kb.length;
      }
      return BigInt(size);
    },
    log_read: (lp, ll, tp, tl, ap, al, buf, cap) => {
      // host.records: [[log, tag, id, payload]…] in id order.
      const [log, tag, after] = [text(lp, ll), text(tp, tl), text(ap, al)];
      const page = [];
      let size = 0;
      for (const [l, t, id, payload] of host.records ?? []) {
        if (l !== log || t !== tag || (after !== "" && id <= after)) continue;
        const parts = [bytes(id), bytes(payload)];
        const need = 8 + parts[0].length + parts[1].length;
        if (size + need > cap) {
          if (page.length === 0) return -2n;
          break;
        }
        page.push(parts);
        size += need;
      }
      const view = new DataView(memory.buffer, buf, size);
      let at = 0;
      for (const parts of page) {
        for (const p of parts) {
          view.setUint32(at, p.length, true);
          new Uint8Array(memory.buffer, buf + at + 4, p.length).set(p);
          at += 4 + p.length;
        }
      }
      return BigInt(size);
    },
    put: (kp, kl, vp, vl) => write("put", host.writeCode)(kp === 0 ? null : text(kp, kl), guest(vp, vl)),
    del: (kp, kl) => write("del", host.writeCode)(text(kp, kl)),
    incr: (kp, kl, delta) => write("incr", host.writeCode)(text(kp, kl), delta),
    xadd: (sp, sl, fp, fl) => write("xadd", host.writeCode)(text(sp, sl), decodeItems(guest(fp, fl))),
    log_append: (lp, ll, tp, tl, pp, pl) =>
      write("log_append", host.writeCode)(text(lp, ll), decodeItems(guest(tp, tl)), text(pp, pl)),
    publish: (cp, cl, mp, ml) => write("publish", host.writeCode)(text(cp, cl), text(mp, ml)),
    reply: (p, l) => {
      state.reply = text(p, l);
    },
    log: (p, l) => {
      state.log.push(text(p, l));
    },
    ...(host.firn ? host.firn(() => memory) : {}),
  };
  for (const name of Object.keys(firn)) firn[name] = counted(name, firn[name]);
  const wasi = {
    random_get: (buf, len) => {
      new Uint8Array(memory.buffer, buf, len).fill(7);
      return 0;
    },
  };
  const instance = new WebAssembly.Instance(module, { firn, wasi_snapshot_preview1: wasi });
  memory = instance.exports.memory;
  collect = instance.exports.__collect;
  try {
    state.code = instance.exports.run();
  } catch (e) {
    state.trap = e;
  }
  return state;
}

/** [u32 little-endian length][bytes] items, as the ABI encodes an entry's fields. */
function decodeItems(b) {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const items = [];
  for (let at = 0; at < b.length; ) {
    const n = view.getUint32(at, true);
    items.push(fromUtf8.decode(b.subarray(at + 4, at + 4 + n)));
    at += 4 + n;
  }
  return items;
}

test("the module imports only from firn and wasi_snapshot_preview1", () => {
  const foreign = WebAssembly.Module.imports(module).filter(
    (i) => i.module !== "firn" && i.module !== "wasi_snapshot_preview1",
  );
  assert.deepEqual(foreign, []);
});

test("the run's input reads as the host gives it", () => {
  const r = run({ kind: 1, keys: ["sensor/7"], args: ["input"], stampUs: 1_700_000_000_123_456n, inputVersion: 9n });
  assert.equal(r.code, 0);
  assert.equal(r.reply, "put sensor/7 1 1700000000123456 9");
});

test("a read that does not fit is read again into a buffer of the answered length", () => {
  for (const n of [0, 1, 256, 257, 70_000]) {
    const v = "x".repeat(n);
    const r = run({ args: ["get", "k"], data: new Map([["k", v]]) });
    assert.equal(r.reply, `value ${n} ${v}`);
    assert.equal(r.calls.get, n > 256 ? 2 : 1, `${n} bytes`);
  }
  // Arguments (and keys) longer than the first buffer, the same way.
  const long = "k".repeat(1000);
  assert.equal(run({ args: ["get", long], data: new Map([[long, "v"]]) }).reply, "value 1 v");
});

test("an absent key is null, and a host's error is a FirnError naming the call and key", () => {
  assert.equal(run({ args: ["get", "k"] }).reply, "absent");
  for (const [code, cause] of [
    [-3, "a limit of the run was exceeded"],
    [-4, "not allowed"],
    [-5, "the read failed"],
    [-9, "host error -9"],
  ]) {
    const r = run({ args: ["get", "k"], host: { firn: () => ({ get: () => BigInt(code) }) } });
    assert.equal(r.reply, `error ${code} firn: get "k": ${cause}`);
  }
});

test("a host whose answer keeps growing is a failed read, not an endless loop", () => {
  let n = 256n;
  const r = run({ args: ["get", "k"], host: { firn: () => ({ get: () => (n *= 2n) }) } });
  assert.equal(r.reply, 'error -5 firn: get "k": the read failed');
  assert.equal(r.calls.get, 2);
});

test("get_version and get_at pass the version and the time on", () => {
  const data = new Map([
    ["k@3", "third"],
    ["k@t1700000000000000", "then"],
  ]);
  assert.equal(run({ args: ["get_version", "k", "3"], data }).reply, "value third");
  assert.equal(run({ args: ["get_version", "k", "4"], data }).reply, "absent");
  assert.equal(run({ args: ["get_at", "k", "1700000000000000"], data }).reply, "value then");
});

test("scan reads every page, in key order, and grows its buffer for a long key", () => {
  const data = new Map();
  for (let i = 0; i < 2500; i++) data.set(`s/${String(i).padStart(5, "0")}`, "v");
  data.set("t/other", "v");
  const r = run({ args: ["scan", "s/"], data });
  const keys = r.reply.split("\n");
  assert.equal(keys.length, 2500);
  assert.deepEqual(keys, [...keys].sort());
  assert.equal(r.calls.scan, 4); // three pages of at most 1,000, then 0
  const long = "s/" + "y".repeat(20_000); // more than the first 16 KiB buffer
  const grown = run({ args: ["scan", "s/"], data: new Map([[long, "v"]]) });
  assert.equal(grown.reply, long);
  assert.equal(run({ args: ["scan", "none/"], data }).reply, "");
});

test("logRead reads a tag's records after an id, and grows its buffer for a large one", () => {
  const records = [
    ["events", "hot", "1-0", "a"],
    ["events", "cold", "1-1", "x"],
    ["events", "hot", "2-0", "b"],
  ];
  assert.equal(run({ args: ["log_read", "events", "hot", ""], host: { records } }).reply, "1-0=a\n2-0=b");
  assert.equal(run({ args: ["log_read", "events", "hot", "1-0"], host: { records } }).reply, "2-0=b");
  assert.equal(run({ args: ["log_read", "events", "none", ""], host: { records } }).reply, "");
  const large = "y".repeat(40_000);
  const grown = run({ args: ["log_read", "events", "hot", ""], host: { records: [["events", "hot", "3-0", large]] } });
  assert.equal(grown.reply, `3-0=${large}`);
  assert.equal(grown.calls.log_read, 3); // 16 KiB, 32 KiB: too small; then 64 KiB
});

test("a malformed scan page, or one that does not move on, is a failed read", () => {
  const failed = 'error -5 firn: scan "s/": the read failed';
  assert.equal(run({ args: ["scan", "s/"], host: { firn: () => ({ scan: () => 3n }) } }).reply, failed);
  // A host that answers the key "a" whatever comes after it would be read forever.
  const stuck = (memory) => ({
    scan: (pp, pl, ap, al, buf) => {
      new DataView(memory().buffer, buf, 5).setUint32(0, 1, true);
      new Uint8Array(memory().buffer, buf + 4, 1)[0] = 0x61;
      return 5n;
    },
  });
  const r = run({ args: ["scan", "s/"], host: { firn: stuck } });
  assert.equal(r.reply, failed);
  assert.equal(r.calls.scan, 2);
});

test("writes pass strings as UTF-8, bytes as they are, and an empty key as pointer 0", () => {
  const put = run({ args: ["put", "k", "é"] });
  assert.deepEqual(put.writes, [["put", "k", Uint8Array.from([0xc3, 0xa9])]]);
  assert.equal(put.reply, "ok");
  const raw = run({ args: ["put_bytes", "k", [0, 255, 1]] });
  assert.deepEqual(raw.writes, [["put", "k", Uint8Array.from([0, 255, 1])]]);
  const empty = run({ args: ["put", "", ""] });
  assert.deepEqual(empty.writes, [["put", null, new Uint8Array(0)]]);
  assert.deepEqual(run({ args: ["del", "k"] }).writes, [["del", "k"]]);
  assert.deepEqual(run({ args: ["incr", "n", "-3"] }).writes, [["incr", "n", -3n]]);
  assert.deepEqual(run({ args: ["publish", "ch", "hi"] }).writes, [["publish", "ch", "hi"]]);
});

test("xadd encodes its fields as length-prefixed items, and wants pairs", () => {
  const r = run({ args: ["xadd", "alerts", "sensor", "sensor/7", "value", "31.5 °C"] });
  assert.deepEqual(r.writes, [["xadd", "alerts", ["sensor", "sensor/7", "value", "31.5 °C"]]]);
  const odd = run({ args: ["xadd", "alerts", "sensor"] });
  assert.deepEqual(odd.writes, []);
  assert.equal(odd.reply, 'error 0 firn: xadd "alerts": an entry needs field-value pairs; got 1 strings');
});

test("logAppend encodes its tags as length-prefixed items, and wants one", () => {
  const r = run({ args: ["log_append", "orders", "region:eu", "all", "{\"item\":1}"] });
  assert.deepEqual(r.writes, [["log_append", "orders", ["region:eu", "all"], '{"item":1}']]);
  const none = run({ args: ["log_append", "orders", "payload"] });
  assert.deepEqual(none.writes, []);
  assert.equal(none.reply, 'error 0 firn: log_append "orders": a record needs a tag');
});

test("a refused write is a FirnError", () => {
  const r = run({ args: ["put", "_firn/x", "v"], host: { writeCode: -4 } });
  assert.equal(r.reply, 'error -4 firn: put "_firn/x": not allowed');
});

test("an abort logs its message through firn.log and traps, importing nothing from env", () => {
  const r = run({ args: ["abort"] });
  assert.ok(r.trap instanceof WebAssembly.RuntimeError, String(r.trap));
  assert.equal(r.log.length, 1);
  assert.match(r.log[0], /^abort: the probe aborts at tests\/probe\.ts:\d+:\d+$/);
});

test("Math.random is seeded from WASI's random_get, which Firn seeds per run", () => {
  const a = run({ args: ["random"] });
  const b = run({ args: ["random"] });
  assert.equal(a.calls.stamp_us, undefined);
  assert.equal(a.reply, b.reply);
  assert.ok(Number(a.reply) >= 0 && Number(a.reply) < 1, a.reply);
});

// @firn/functions: the AssemblyScript SDK for Firn functions, WebAssembly modules that Firn
// runs next to its data, called directly (FCALL), by a trigger on each committed change
// under a prefix, or by a timer (docs/functions.md).
//
// A function is a module that exports `run(): i32`:
//
//   import { keys, incr, log } from "@firn/functions";
//
//   export function run(): i32 {
//     const key = keys()[0];
//     const err = incr("count/" + key, 1);
//     if (err !== null) {
//       log(`counting ${key}: ${err.toString()}`);
//       return 1; // the run failed: none of its writes are kept
//     }
//     return 0;
//   }
//
// Build it with this package's asconfig.json as the base of yours (README.md), so that the
// module imports nothing but "firn" (and "wasi_snapshot_preview1" for Math.random's seed):
// Firn refuses any other import.
//
// Keep nothing a run relies on in globals: whether an instance serves one run or several is
// Firn's choice. Reads see one consistent view of the data plus the run's own earlier writes;
// writes are buffered and committed together, atomically, when `run` returns 0.
//
// AssemblyScript has no exceptions a program can catch, so a host call that fails answers a
// FirnError as a value (a write: FirnError | null; a read: a Result with value and error),
// and the caller decides — usually to log it and return non-zero, which drops the run's
// writes and gives FCALL's caller (or the trigger's dead letters) the last line logged.

import * as host from "./host";
import { Code } from "./host";

export { Code } from "./host";

/** What started a run. */
export enum RunKind {
  /** a direct call (FCALL, POST /v1/functions/{name}/call); keys and args are the caller's */
  Call = 0,
  /** a trigger's input that is a put; keys() has the key, args() the new value */
  Put = 1,
  /** a trigger's input that is a delete; keys() has the key, args() is empty */
  Delete = 2,
  /** a timer firing; keys() is empty, args() has the timer's payload */
  Timer = 3,
  /** a trigger's input that is a stream's entry (ON STREAM) or a log tag's record (ON LOG);
   * keys() has the stream or tag, args() the id and then the fields and values (a record:
   * its id and its payload) */
  Entry = 4,
}

/** A host call that failed: which call, on which key (stream, channel, prefix), and why. */
export class FirnError {
  constructor(
    /** "get", "put", "xadd" … */
    public op: string,
    public key: string,
    /** the host's negative code (see Code); 0 for a call this SDK refused itself */
    public code: i32,
    /** why, when the SDK refused the call itself */
    public detail: string = "",
  ) {}

  /** The cause in words. */
  get cause(): string {
    switch (this.code) {
      case Code.Limit:
        return "a limit of the run was exceeded";
      case Code.NotAllowed:
        return "not allowed";
      case Code.ReadFailed:
        return "the read failed";
      case 0:
        return this.detail;
    }
    return "host error " + this.code.toString();
  }

  toString(): string {
    return "firn: " + this.op + ' "' + this.key + '": ' + this.cause;
  }
}

/** A read's answer: its value, or the error that kept it from being read. */
export class Result<T> {
  constructor(
    public value: T,
    public error: FirnError | null = null,
  ) {}

  /** The read was answered (a value, or none). */
  get ok(): bool {
    return this.error === null;
  }
}

// ---------------------------------------------------------------------------------------
// The run's input.

/** What started this run. */
export function kind(): RunKind {
  return <RunKind>host.kind();
}

/** The run's keys as text: FCALL's keys, or a trigger's one input key; none for a timer. */
export function keys(): string[] {
  const raw = keyBytes();
  const out = new Array<string>(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = text(raw[i]);
  return out;
}

/** The run's keys as bytes. */
export function keyBytes(): Uint8Array[] {
  const n = host.key_count();
  const out = new Array<Uint8Array>(n);
  for (let i = 0; i < n; i++) out[i] = orEmpty(fetch("key", i.toString(), readKey, NO_KEY, i, 0));
  return out;
}

/** The run's arguments: FCALL's arguments, a trigger put's new value, a timer's payload. */
export function args(): Uint8Array[] {
  const n = host.arg_count();
  const out = new Array<Uint8Array>(n);
  for (let i = 0; i < n; i++) out[i] = orEmpty(fetch("arg", i.toString(), readArg, NO_KEY, i, 0));
  return out;
}

/** The run's arguments as UTF-8 text. */
export function argStrings(): string[] {
  const raw = args();
  const out = new Array<string>(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = text(raw[i]);
  return out;
}

/** The run's time in microseconds since the Unix epoch: a trigger's input's commit time, or
 * the time a call or timer was stamped. Reads are of the data as it was then. */
export function stampUs(): i64 {
  return host.stamp_us();
}

/** The run's stamp as a Date (millisecond precision). Use this, not Date.now(), which
 * imports a clock from "env" that Firn does not provide. */
export function stamp(): Date {
  return new Date(host.stamp_us() / 1000);
}

/** The version of a trigger's input key this run is for; 0 for a call or a timer. Its
 * earlier versions are inputVersion() - 1, - 2 … (see getVersion). */
export function inputVersion(): u64 {
  return <u64>host.input_version();
}

// ---------------------------------------------------------------------------------------
// Reads: the data as it was at the run's stamp, one consistent cut across every key and
// shard, together with the run's own earlier writes. A value is null when the key has none.

/** The key's value. */
export function get(key: string): Result<Uint8Array | null> {
  const k = String.UTF8.encode(key);
  return fetch("get", key, readGet, k, 0, 0);
}

/** The key's value as UTF-8 text. */
export function getString(key: string): Result<string | null> {
  return asText(get(key));
}

/** One version of the key; null when that version is absent: never written, a delete, or
 * compacted away. */
export function getVersion(key: string, version: u64): Result<Uint8Array | null> {
  const k = String.UTF8.encode(key);
  return fetch("get_version", key, readGetVersion, k, 0, <i64>version);
}

/** One version of the key as UTF-8 text. */
export function getVersionString(key: string, version: u64): Result<string | null> {
  return asText(getVersion(key, version));
}

/** The key's value as it was at an earlier time, in microseconds since the Unix epoch. */
export function getAt(key: string, atUs: i64): Result<Uint8Array | null> {
  const k = String.UTF8.encode(key);
  return fetch("get_at", key, readGetAt, k, 0, atUs);
}

/** The key's value at an earlier time, as UTF-8 text. */
export function getAtString(key: string, atUs: i64): Result<string | null> {
  return asText(getAt(key, atUs));
}

// scanBufBytes holds the longest key (8 KiB) with its length, and usually many keys; a page
// the host says is too big for it is asked again with twice the buffer, up to the most.
const SCAN_BUF_BYTES: i32 = 16 << 10;
const SCAN_BUF_BYTES_MAX: i32 = 1 << 20;

/** Every key under the prefix, in key order. Each host call reads a page of at most 1,000
 * keys, so a large prefix costs many calls against the run's limit of host calls. */
export function scan(prefix: string): Result<string[]> {
  const found = new Array<string>();
  const p = String.UTF8.encode(prefix);
  let buf = new Uint8Array(SCAN_BUF_BYTES);
  let after = new Uint8Array(0);
  while (true) {
    const n = host.scan(ptr(p), p.byteLength, data(after), after.length, buf.dataStart, buf.length);
    if (n == 0) return new Result<string[]>(found);
    if (n == Code.TooSmall && buf.length < SCAN_BUF_BYTES_MAX) {
      buf = new Uint8Array(2 * buf.length);
      continue;
    }
    if (n < 0) return new Result<string[]>(found, new FirnError("scan", prefix, <i32>n));
    if (n > <i64>buf.length) return new Result<string[]>(found, new FirnError("scan", prefix, Code.ReadFailed));
    const last = decodeScanPage(buf.subarray(0, <i32>n), found);
    // A malformed page, or one that does not move past `after` (which would loop forever).
    if (last === null || compareBytes(last, after) <= 0) {
      return new Result<string[]>(found, new FirnError("scan", prefix, Code.ReadFailed));
    }
    after = last;
  }
}

/** A record of a log tag, or an entry of a stream, as logRead answers it. */
export class LogRecord {
  constructor(
    /** its id, "ms-n" */
    public id: string,
    /** its payload; a stream entry's is its fields and values, see fields() */
    public payload: Uint8Array,
  ) {}

  /** A stream entry's fields and values, in order (field, value, …); null if it is none. */
  fields(): string[] | null {
    const items = new Array<string>();
    return decodeScanPage(this.payload, items) === null && this.payload.length > 0 ? null : items;
  }
}

// A record is at most the largest value a store keeps (16 MiB), with its id.
const LOG_BUF_BYTES_MAX: i32 = 32 << 20;

/** The records of `tag` in `log` after the id `after` ("" for the first), oldest first, as of
 * the run's cut (a trigger's: its input's stamp): one page of at most 1,000; call it again
 * with the last id for more. A stream is the tag of its own name: logRead(s, s, after). */
export function logRead(log: string, tag: string, after: string): Result<LogRecord[]> {
  const found = new Array<LogRecord>();
  const l = String.UTF8.encode(log);
  const t = String.UTF8.encode(tag);
  const a = String.UTF8.encode(after);
  let buf = new Uint8Array(SCAN_BUF_BYTES);
  while (true) {
    const n = host.log_read(ptr(l), l.byteLength, ptr(t), t.byteLength, ptr(a), a.byteLength, buf.dataStart, buf.length);
    if (n == 0) return new Result<LogRecord[]>(found);
    if (n == Code.TooSmall && buf.length < LOG_BUF_BYTES_MAX) {
      buf = new Uint8Array(2 * buf.length);
      continue;
    }
    if (n < 0) return new Result<LogRecord[]>(found, new FirnError("log_read", tag, <i32>n));
    if (n > <i64>buf.length) return new Result<LogRecord[]>(found, new FirnError("log_read", tag, Code.ReadFailed));
    const page = buf.subarray(0, <i32>n);
    let at = 0;
    let id: string | null = null;
    while (at < page.length) {
      if (page.length - at < 4) return new Result<LogRecord[]>(found, new FirnError("log_read", tag, Code.ReadFailed));
      const len = load<u32>(page.dataStart + <usize>at);
      if (<u64>len > <u64>(page.length - at - 4)) {
        return new Result<LogRecord[]>(found, new FirnError("log_read", tag, Code.ReadFailed));
      }
      const item = page.slice(at + 4, at + 4 + <i32>len);
      at += 4 + <i32>len;
      if (id === null) {
        id = text(item);
      } else {
        found.push(new LogRecord(id, item));
        id = null;
      }
    }
    return new Result<LogRecord[]>(found);
  }
}

/** Appends a page's keys — [u32 little-endian length][key bytes] items — to `into`, and
 * answers the page's last key; null when the page is empty or malformed. */
function decodeScanPage(page: Uint8Array, into: string[]): Uint8Array | null {
  let last: Uint8Array | null = null;
  let at = 0;
  while (at < page.length) {
    if (page.length - at < 4) return null;
    const n = load<u32>(page.dataStart + <usize>at);
    if (<u64>n > <u64>(page.length - at - 4)) return null;
    const key = page.slice(at + 4, at + 4 + <i32>n);
    into.push(text(key));
    last = key;
    at += 4 + <i32>n;
  }
  return last;
}

// ---------------------------------------------------------------------------------------
// Writes: buffered, and committed together, atomically, when run returns 0; later reads in
// the same run already see them. Each answers null, or the FirnError that refused it (the
// writes before it are still buffered, so return non-zero to drop them all). A value is a
// string (written as UTF-8) or a Uint8Array.

/** Sets the key to the value. */
export function put<T>(key: string, value: T): FirnError | null {
  const k = String.UTF8.encode(key);
  const v = bytesOf<T>(value);
  return written("put", key, host.put(ptr(k), k.byteLength, data(v), v.length));
}

/** Deletes the key. */
export function del(key: string): FirnError | null {
  const k = String.UTF8.encode(key);
  return written("del", key, host.del(ptr(k), k.byteLength));
}

/** Adds delta to the key's integer value (an absent key counts as 0). Counting with incr,
 * rather than get and put, stays right when the runs for several inputs commit in turn: a
 * trigger's run reads the cut at its input's stamp, without the outputs of earlier runs. */
export function incr(key: string, delta: i64): FirnError | null {
  const k = String.UTF8.encode(key);
  return written("incr", key, host.incr(ptr(k), k.byteLength, delta));
}

/** Appends an entry with an automatic id to the stream, as XADD stream * f1 v1 f2 v2 …. */
export function xadd(stream: string, fieldsAndValues: string[]): FirnError | null {
  const n = fieldsAndValues.length;
  if (n == 0 || n % 2 != 0) {
    return new FirnError("xadd", stream, 0, "an entry needs field-value pairs; got " + n.toString() + " strings");
  }
  const fields = encodeItems(fieldsAndValues);
  const s = String.UTF8.encode(stream);
  return written("xadd", stream, host.xadd(ptr(s), s.byteLength, data(fields), fields.length));
}

/** Appends a record with its tags (1 to 16; the first names the shard that keeps it) and
 * payload to the log, as FIRN.LOG APPEND log TAGS n tag… payload, committed with the run's
 * other writes. Its seq is the commit's stamp; each tag's readers see it in order. */
export function logAppend<T>(log: string, tags: string[], payload: T): FirnError | null {
  if (tags.length == 0) return new FirnError("log_append", log, 0, "a record needs a tag");
  const l = String.UTF8.encode(log);
  const t = encodeItems(tags);
  const p = bytesOf<T>(payload);
  return written("log_append", log, host.log_append(ptr(l), l.byteLength, data(t), t.length, data(p), p.length));
}

/** Strings as `[u32 LE length][UTF-8 bytes]…` (xadd's fields, logAppend's tags). */
function encodeItems(items: string[]): Uint8Array {
  const n = items.length;
  const encoded = new Array<ArrayBuffer>(n);
  let size = 0;
  for (let i = 0; i < n; i++) {
    encoded[i] = String.UTF8.encode(items[i]);
    size += 4 + encoded[i].byteLength;
  }
  const out = new Uint8Array(size);
  let at: usize = out.dataStart;
  for (let i = 0; i < n; i++) {
    const len = encoded[i].byteLength;
    store<u32>(at, <u32>len); // wasm is little-endian, as the ABI wants
    memory.copy(at + 4, changetype<usize>(encoded[i]), <usize>len);
    at += 4 + <usize>len;
  }
  return out;
}

/** Publishes msg on the pub/sub channel once the run's writes have committed (never, if the
 * run fails). */
export function publish<T>(channel: string, msg: T): FirnError | null {
  const c = String.UTF8.encode(channel);
  const m = bytesOf<T>(msg);
  return written("publish", channel, host.publish(ptr(c), c.byteLength, data(m), m.length));
}

/** Sets the answer FCALL returns (a bulk string). */
export function reply<T>(answer: T): void {
  const b = bytesOf<T>(answer);
  host.reply(data(b), b.length);
}

/** Writes one line into the node's log for the operator. A run's log is bounded; what goes
 * past the bound is dropped. The last line of a run that returns non-zero is also in its
 * error. */
export function log(line: string): void {
  const b = String.UTF8.encode(line);
  host.log(ptr(b), b.byteLength);
}

// ---------------------------------------------------------------------------------------
// What the compiler's `--use abort=… trace=… seed=…` options (asconfig.json) point at, in
// place of the imports from "env" AssemblyScript makes by default, which Firn refuses.

/** A failed assertion, a bounds check or `throw`: a line in the log, then a trap, which
 * fails the run (writing nothing). */
export function firnAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  let where = "";
  if (fileName !== null) where = " at " + fileName + ":" + line.toString() + ":" + column.toString();
  log("abort: " + (message !== null ? message : "(no message)") + where);
  unreachable();
}

/** trace(): a line in the log. */
export function firnTrace(message: string, n: i32 = 0, a0: f64 = 0, a1: f64 = 0, a2: f64 = 0, a3: f64 = 0, a4: f64 = 0): void {
  let line = "trace: " + message;
  if (n > 0) line += " " + a0.toString();
  if (n > 1) line += ", " + a1.toString();
  if (n > 2) line += ", " + a2.toString();
  if (n > 3) line += ", " + a3.toString();
  if (n > 4) line += ", " + a4.toString();
  log(line);
}

// Firn seeds WASI's random_get from the run's input and stamp, so Math.random draws the same
// numbers whenever a run is run again. Imported only by a module that uses Math.random.
@external("wasi_snapshot_preview1", "random_get")
declare function wasi_random_get(buf: usize, len: usize): u16;

/** Math.random's seed, from random_get. */
export function firnSeed(): f64 {
  const buf = memory.data(8);
  if (wasi_random_get(buf, 8) != 0) return <f64>host.stamp_us();
  return reinterpret<f64>(load<u64>(buf));
}

// ---------------------------------------------------------------------------------------
// Memory.

// FIRST_BUF_BYTES is the buffer a read starts with; a longer answer is read again into a
// buffer of its exact length, so most small values cost one host call.
const FIRST_BUF_BYTES: i32 = 256;

/** A host read that copies its answer only when it fits and otherwise answers its length:
 * of the key `k` (get, get_version with `n` the version, get_at with `n` the time) or of the
 * input's `i`-th key or argument. AssemblyScript has no closures, so each read is a plain
 * function of the same shape. `k` travels as the object, not as a pointer taken early, so
 * that it stays reachable, and so not collected, while the reads allocate their buffers. */
type Read = (k: ArrayBuffer, i: i32, n: i64, buf: usize, cap: i32) => i64;

const NO_KEY = new ArrayBuffer(0);

function readKey(_k: ArrayBuffer, i: i32, _n: i64, buf: usize, cap: i32): i64 {
  return <i64>host.key(i, buf, cap);
}
function readArg(_k: ArrayBuffer, i: i32, _n: i64, buf: usize, cap: i32): i64 {
  return <i64>host.arg(i, buf, cap);
}
function readGet(k: ArrayBuffer, _i: i32, _n: i64, buf: usize, cap: i32): i64 {
  return host.get(ptr(k), k.byteLength, buf, cap);
}
function readGetVersion(k: ArrayBuffer, _i: i32, version: i64, buf: usize, cap: i32): i64 {
  return host.get_version(ptr(k), k.byteLength, version, buf, cap);
}
function readGetAt(k: ArrayBuffer, _i: i32, atUs: i64, buf: usize, cap: i32): i64 {
  return host.get_at(ptr(k), k.byteLength, atUs, buf, cap);
}

/** Runs `read`; when its answer did not fit, reads again into a buffer of the answered
 * length. A run's reads are of one fixed cut, so the second try has the length the first
 * said; a third would be a host that changed its answer. */
function fetch(op: string, key: string, read: Read, k: ArrayBuffer, i: i32, n: i64): Result<Uint8Array | null> {
  let buf = new Uint8Array(FIRST_BUF_BYTES);
  for (let attempt = 0; attempt < 2; attempt++) {
    const got = read(k, i, n, buf.dataStart, buf.length);
    if (got == Code.Absent) return new Result<Uint8Array | null>(null);
    if (got < 0) return new Result<Uint8Array | null>(null, new FirnError(op, key, <i32>got));
    if (got <= <i64>buf.length) return new Result<Uint8Array | null>(buf.subarray(0, <i32>got));
    if (got > <i64>i32.MAX_VALUE) {
      // More than a 32-bit module's memory could hold.
      return new Result<Uint8Array | null>(null, new FirnError(op, key, Code.Limit));
    }
    buf = new Uint8Array(<i32>got);
  }
  return new Result<Uint8Array | null>(null, new FirnError(op, key, Code.ReadFailed));
}

function orEmpty(r: Result<Uint8Array | null>): Uint8Array {
  const v = r.value;
  return v !== null ? v : new Uint8Array(0);
}

function asText(r: Result<Uint8Array | null>): Result<string | null> {
  const v = r.value;
  return new Result<string | null>(v !== null ? text(v) : null, r.error);
}

/** A value as the bytes the host gets: a string's UTF-8, a Uint8Array as it is (checked
 * when compiled, so a number or an object is refused by the compiler, not at run time). */
function bytesOf<T>(value: T): Uint8Array {
  if (isString<T>()) {
    return Uint8Array.wrap(String.UTF8.encode(changetype<string>(value)));
  } else if (value instanceof Uint8Array) {
    return changetype<Uint8Array>(value);
  } else {
    ERROR("a value is a string or a Uint8Array");
    return new Uint8Array(0);
  }
}

/** UTF-8 bytes as a string. */
export function text(b: Uint8Array): string {
  return String.UTF8.decodeUnsafe(b.dataStart, <usize>b.length);
}

// The host wants pointer 0 with length 0 for an empty key, value or message.
function ptr(b: ArrayBuffer): usize {
  return b.byteLength == 0 ? 0 : changetype<usize>(b);
}

function data(b: Uint8Array): usize {
  return b.length == 0 ? 0 : b.dataStart;
}

function compareBytes(a: Uint8Array, b: Uint8Array): i32 {
  const n = min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = <i32>a[i] - <i32>b[i];
    if (d != 0) return d;
  }
  return a.length - b.length;
}

function written(op: string, key: string, code: i32): FirnError | null {
  return code >= 0 ? null : new FirnError(op, key, code);
}

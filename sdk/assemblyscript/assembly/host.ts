// The host functions Firn gives every run, in the module "firn" (docs/functions.md, "The
// host ABI"). Pointers are offsets into this module's memory and lengths are byte counts;
// the answers are lengths, 0, or the negative codes in `Code`. The typed functions in
// index.ts wrap these; they are exported for code that wants the codes themselves.

/** The host's negative answers. */
export enum Code {
  /** no such key, version or index */
  Absent = -1,
  /** the buffer is too small (`scan`, `log_read`) */
  TooSmall = -2,
  /** a limit of the run was exceeded */
  Limit = -3,
  /** a key under `_firn/`, or outside the rights of the user the run acts for */
  NotAllowed = -4,
  /** the read failed: the run's view is incomplete */
  ReadFailed = -5,
}

// The run's input.

@external("firn", "kind")
export declare function kind(): i32;

@external("firn", "key_count")
export declare function key_count(): i32;

@external("firn", "key")
export declare function key(i: i32, buf: usize, cap: i32): i32;

@external("firn", "arg_count")
export declare function arg_count(): i32;

@external("firn", "arg")
export declare function arg(i: i32, buf: usize, cap: i32): i32;

@external("firn", "stamp_us")
export declare function stamp_us(): i64;

@external("firn", "input_version")
export declare function input_version(): i64;

// Reads, at the run's stamp, seeing the run's own earlier writes.

@external("firn", "get")
export declare function get(kp: usize, kl: i32, buf: usize, cap: i32): i64;

@external("firn", "get_version")
export declare function get_version(kp: usize, kl: i32, version: i64, buf: usize, cap: i32): i64;

@external("firn", "get_at")
export declare function get_at(kp: usize, kl: i32, at_us: i64, buf: usize, cap: i32): i64;

@external("firn", "scan")
export declare function scan(pp: usize, pl: i32, after_p: usize, after_l: i32, buf: usize, cap: i32): i64;

@external("firn", "log_read")
export declare function log_read(lp: usize, ll: i32, tp: usize, tl: i32, after_p: usize, after_l: i32, buf: usize, cap: i32): i64;

// Writes, buffered and committed together when `run` returns 0.

@external("firn", "put")
export declare function put(kp: usize, kl: i32, vp: usize, vl: i32): i32;

@external("firn", "del")
export declare function del(kp: usize, kl: i32): i32;

@external("firn", "incr")
export declare function incr(kp: usize, kl: i32, delta: i64): i32;

@external("firn", "xadd")
export declare function xadd(sp: usize, sl: i32, fp: usize, fl: i32): i32;

@external("firn", "log_append")
export declare function log_append(lp: usize, ll: i32, tp: usize, tl: i32, pp: usize, pl: i32): i32;

@external("firn", "publish")
export declare function publish(cp: usize, cl: i32, mp: usize, ml: i32): i32;

// Other.

@external("firn", "reply")
export declare function reply(p: usize, l: i32): void;

@external("firn", "log")
export declare function log(p: usize, l: i32): void;

//! A function's calls into the node with arguments a module chose: every host call of the
//! `firn` module and the WASI calls that take pointers, as a run makes them — reading keys,
//! values, fields and iovecs from the guest's memory and writing answers into it — through
//! [`Sandbox::run`], with a host that answers reads (and fails some).
//!
//! The input is a program for one fixed module: it is the run's argument, which the module
//! copies into its memory at [`INPUT_AT`], then reads as a 4-byte little-endian count of
//! records and that many records of 33 bytes — a byte picking the call (modulo their
//! number), then eight 4-byte little-endian arguments (an `i64` argument reads 8 bytes from
//! its place) — and whatever follows them, which the records' pointers may point at.
//! Pointers and lengths are whatever the input says: into the memory, past its end,
//! negative. A call the sandbox refuses ends the run with an error, as it must; nothing may
//! panic.

use std::sync::LazyLock;

use bytes::Bytes;
use firn_model::{FirnError, LogSeq};
use firn_node::functions::sandbox::{
    Compiled, Host, InputKind, Invocation, Outcome, ReadPoint, Sandbox,
};

/// The calls the module makes: module, name, parameters (`i` an i32, `I` an i64), result.
const CALLS: &[(&str, &str, &str, &str)] = &[
    ("firn", "kind", "", "i32"),
    ("firn", "key_count", "", "i32"),
    ("firn", "arg_count", "", "i32"),
    ("firn", "stamp_us", "", "i64"),
    ("firn", "input_version", "", "i64"),
    ("firn", "key", "iii", "i32"),
    ("firn", "arg", "iii", "i32"),
    ("firn", "get", "iiii", "i64"),
    ("firn", "get_version", "iiIii", "i64"),
    ("firn", "get_at", "iiIii", "i64"),
    ("firn", "scan", "iiiiii", "i64"),
    ("firn", "log_read", "iiiiiiii", "i64"),
    ("firn", "put", "iiii", "i32"),
    ("firn", "del", "ii", "i32"),
    ("firn", "incr", "iiI", "i32"),
    ("firn", "xadd", "iiii", "i32"),
    ("firn", "log_append", "iiiiii", "i32"),
    ("firn", "publish", "iiii", "i32"),
    ("firn", "reply", "ii", ""),
    ("firn", "log", "ii", ""),
    ("wasi_snapshot_preview1", "fd_write", "iiii", "i32"),
    ("wasi_snapshot_preview1", "random_get", "ii", "i32"),
    ("wasi_snapshot_preview1", "clock_time_get", "iIi", "i32"),
    ("wasi_snapshot_preview1", "clock_res_get", "ii", "i32"),
    ("wasi_snapshot_preview1", "args_sizes_get", "ii", "i32"),
    ("wasi_snapshot_preview1", "environ_sizes_get", "ii", "i32"),
];

/// Where the module copies its input: the memory below it is where answers mostly land.
pub const INPUT_AT: u32 = 0x8000;
/// A record: the call's byte, then eight 4-byte arguments.
pub const RECORD_BYTES: u32 = 33;

/// The module, as text: imports, two pages of memory, and a `run` that interprets its
/// argument.
pub fn module_text() -> String {
    let mut wat = String::from("(module\n");
    for (i, (module, name, params, result)) in CALLS.iter().enumerate() {
        let params: Vec<&str> = params
            .chars()
            .map(|p| if p == 'I' { "i64" } else { "i32" })
            .collect();
        let params = if params.is_empty() {
            String::new()
        } else {
            format!(" (param {})", params.join(" "))
        };
        let result = if result.is_empty() {
            String::new()
        } else {
            format!(" (result {result})")
        };
        wat += &format!("  (import \"{module}\" \"{name}\" (func $h{i}{params}{result}))\n");
    }
    wat += "  (memory (export \"memory\") 2)\n";
    wat += "  (func (export \"run\") (result i32) (local $p i32) (local $end i32) (local $records i32)\n";
    // A warm instance keeps its memory between runs: each run starts from zeros, so that an
    // input does the same alone as after others.
    wat += "    (memory.fill (i32.const 0) (i32.const 0) (i32.const 131072))\n";
    // The input: argument 0, copied to INPUT_AT; its records end where its count says, or
    // where it does.
    wat += &format!(
        "    (local.set $end (i32.add (i32.const {INPUT_AT}) \
         (call $h6 (i32.const 0) (i32.const {INPUT_AT}) (i32.const {INPUT_AT}))))\n"
    );
    wat += &format!("    (local.set $p (i32.const {}))\n", INPUT_AT + 4);
    wat += &format!(
        "    (if (i32.lt_u (i32.load (i32.const {INPUT_AT})) (i32.const 1024)) (then\n\
         \x20     (local.set $records (i32.add (local.get $p) \
         (i32.mul (i32.load (i32.const {INPUT_AT})) (i32.const {RECORD_BYTES}))))\n\
         \x20     (if (i32.lt_u (local.get $records) (local.get $end)) \
         (then (local.set $end (local.get $records))))))\n"
    );
    wat += "    (loop $next\n";
    wat += &format!(
        "      (if (i32.gt_u (i32.add (local.get $p) (i32.const {RECORD_BYTES})) (local.get $end)) \
         (then (return (i32.const 0))))\n"
    );
    wat += "      (block $out\n";
    let n = CALLS.len();
    for i in (0..n).rev() {
        wat += &format!("      (block $c{i}\n");
    }
    let labels: Vec<String> = (0..n).map(|i| format!("$c{i}")).collect();
    wat += &format!(
        "        (br_table {} (i32.rem_u (i32.load8_u (local.get $p)) (i32.const {n}))))\n",
        labels.join(" ")
    );
    for (i, (_, _, params, result)) in CALLS.iter().enumerate() {
        let args: Vec<String> = params
            .chars()
            .enumerate()
            .map(|(k, p)| {
                let at = format!("(i32.add (local.get $p) (i32.const {}))", 1 + 4 * k);
                if p == 'I' {
                    format!("(i64.load {at})")
                } else {
                    format!("(i32.load {at})")
                }
            })
            .collect();
        let call = format!("(call $h{i} {})", args.join(" "));
        let call = if result.is_empty() {
            call
        } else {
            format!("(drop {call})")
        };
        wat += &format!("        {call} (br $out))\n");
    }
    wat += &format!(
        "      (local.set $p (i32.add (local.get $p) (i32.const {RECORD_BYTES})))\n      (br $next))\n"
    );
    wat += "    (i32.const 0)))\n";
    wat
}

static SANDBOX: LazyLock<(Sandbox, Compiled)> = LazyLock::new(|| {
    let sandbox = Sandbox::new().expect("a sandbox");
    let module = wat::parse_str(module_text()).expect("the host calls' module");
    let compiled = sandbox
        .compile(&module)
        .expect("the host calls' module compiles");
    (sandbox, compiled)
});

/// Answers every read: a key's value is its length, in decimal (so that `incr` adds to
/// it); none for an empty key; a key starting with `!` fails, as a read of an unavailable
/// shard does.
struct Answers;

fn refused(key: &[u8]) -> Result<(), FirnError> {
    if key.first() == Some(&b'!') {
        return Err(FirnError::Unavailable("the shard has no leader".into()));
    }
    Ok(())
}

impl Host for Answers {
    fn get(&mut self, key: &[u8], _: ReadPoint) -> Result<Option<Bytes>, FirnError> {
        refused(key)?;
        Ok((!key.is_empty()).then(|| Bytes::from(key.len().to_string())))
    }

    fn scan(&mut self, prefix: &[u8], _: &[u8], limit: usize) -> Result<Vec<Bytes>, FirnError> {
        refused(prefix)?;
        Ok((0..limit.min(3))
            .map(|i| Bytes::from([prefix, &[b'0' + i as u8]].concat()))
            .collect())
    }

    fn log_read(
        &mut self,
        log: &[u8],
        tag: &[u8],
        after: Option<LogSeq>,
        limit: usize,
    ) -> Result<Vec<(LogSeq, Bytes)>, FirnError> {
        refused(log)?;
        let first = after.map_or(1, |s| s.ms.saturating_add(1));
        Ok((0..limit.min(2) as u64)
            .map(|i| (LogSeq::new(first + i, 0), Bytes::copy_from_slice(tag)))
            .collect())
    }
}

pub fn host_calls(data: &[u8]) {
    let _ = run_program(data);
}

/// Runs `data` as the module's program: what the run did, or why it was refused.
pub fn run_program(data: &[u8]) -> Result<Outcome, FirnError> {
    let (sandbox, compiled) = &*SANDBOX;
    let input = Invocation {
        kind: InputKind::Call,
        keys: vec![Bytes::from_static(b"sensors/kitchen")],
        args: vec![Bytes::copy_from_slice(data)],
        stamp_us: 1_790_000_000_000_000,
        input_version: 7,
    };
    sandbox.run(compiled, input, Box::new(Answers))
}

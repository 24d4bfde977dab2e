use bytes::Bytes;

use crate::{seed, seeds};

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_wasm_module_seeds() {
    let modules: &[(&str, &str)] = &[
        (
            "minimal",
            r#"(module (func (export "run") (result i32) (i32.const 0)))"#,
        ),
        (
            "host-calls",
            r#"(module
                (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
                (import "firn" "reply" (func $reply (param i32 i32)))
                (memory (export "memory") 1)
                (data (i32.const 0) "k1v1")
                (func (export "run") (result i32)
                    (drop (call $put (i32.const 0) (i32.const 2) (i32.const 2) (i32.const 2)))
                    (call $reply (i32.const 0) (i32.const 2))
                    (i32.const 0)))"#,
        ),
        (
            "reactor",
            r#"(module
                (memory (export "memory") 1 2)
                (global $ready (mut i32) (i32.const 0))
                (table 2 funcref)
                (elem (i32.const 0) $init)
                (func $init (export "_initialize") (global.set $ready (i32.const 1)))
                (func (export "run") (result i32)
                    (if (result i32) (global.get $ready)
                        (then (i32.const 0)) (else (i32.const 1)))))"#,
        ),
        (
            "start",
            r#"(module
                (global $n (mut i64) (i64.const 0))
                (func $count (local $i i32)
                    (loop $l
                        (global.set $n (i64.add (global.get $n) (i64.const 1)))
                        (local.set $i (i32.add (local.get $i) (i32.const 1)))
                        (br_if $l (i32.lt_u (local.get $i) (i32.const 100)))))
                (start $count)
                (func (export "run") (result i32) (i32.wrap_i64 (global.get $n))))"#,
        ),
        (
            "wrong-run-type",
            r#"(module (func (export "run") (param i32) (result i32) (local.get 0)))"#,
        ),
        (
            "unknown-import",
            r#"(module (import "env" "nope" (func)) (func (export "run") (result i32) (i32.const 0)))"#,
        ),
    ];
    for (name, text) in modules {
        seed("wasm_module", name, &wat::parse_str(text).unwrap());
    }
}

/// A program for `host_calls`'s module: its records (a call's number, eight arguments),
/// then `data`, which the records point at through [`host_data`].
fn host_program(records: &[(u8, [i32; 8])], data: &[u8]) -> Vec<u8> {
    let mut out = (records.len() as u32).to_le_bytes().to_vec();
    for (call, args) in records {
        out.push(*call);
        for a in args {
            out.extend_from_slice(&a.to_le_bytes());
        }
    }
    out.extend_from_slice(data);
    out
}

/// Where a program's data lands in the module's memory: after its count and `records`.
fn host_data(records: usize) -> i32 {
    (firn_fuzz_targets::host_calls::INPUT_AT
        + 4
        + records as u32 * firn_fuzz_targets::host_calls::RECORD_BYTES) as i32
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_host_calls_seeds() {
    // The data: a key, a value, fields and tags as `[u32 LE length][bytes]…`, an iovec
    // (pointer, length) and its text, a log record's id.
    let mut data = Vec::new();
    let mut place = |bytes: &[u8]| {
        let at = data.len() as i32;
        data.extend_from_slice(bytes);
        (at, bytes.len() as i32)
    };
    let key = place(b"sensors/kitchen");
    let value = place(b"21.5");
    let fields = place(b"\x04\x00\x00\x00temp\x04\x00\x00\x0021.5");
    let tags = place(b"\x07\x00\x00\x00kitchen");
    let text = place(b"a line for the log\n");
    let id = place(b"1-0");
    let iovec = place(&[0u8; 8]);
    let fail = place(b"!down");
    // Every call once, with pointers into the data and answers at 0x100 (4 KiB of room).
    let calls = 26;
    let d = host_data(calls);
    let (k, v, f, t, x, i, io) = (
        d + key.0,
        d + value.0,
        d + fields.0,
        d + tags.0,
        d + text.0,
        d + id.0,
        d + iovec.0,
    );
    // The iovec names the text: its pointer and length, in place.
    data[iovec.0 as usize..iovec.0 as usize + 4].copy_from_slice(&x.to_le_bytes());
    data[iovec.0 as usize + 4..iovec.0 as usize + 8].copy_from_slice(&text.1.to_le_bytes());
    let (out, cap) = (0x100, 0x1000);
    let records: Vec<(u8, [i32; 8])> = vec![
        (0, [0; 8]),
        (1, [0; 8]),
        (2, [0; 8]),
        (3, [0; 8]),
        (4, [0; 8]),
        (5, [0, out, cap, 0, 0, 0, 0, 0]),
        (6, [0, out, cap, 0, 0, 0, 0, 0]),
        (7, [k, key.1, out, cap, 0, 0, 0, 0]),
        (8, [k, key.1, 3, 0, out, cap, 0, 0]),
        (9, [k, key.1, 1_000_000, 0, out, cap, 0, 0]),
        (10, [k, 8, 0, 0, out, cap, 0, 0]),
        (11, [k, key.1, t + 4, tags.1 - 4, i, id.1, out, cap]),
        (12, [k, key.1, v, value.1, 0, 0, 0, 0]),
        (13, [k, key.1, 0, 0, 0, 0, 0, 0]),
        (14, [k, key.1, 5, 0, 0, 0, 0, 0]),
        (15, [k, key.1, f, fields.1, 0, 0, 0, 0]),
        (16, [k, key.1, t, tags.1, v, value.1, 0, 0]),
        (17, [k, key.1, v, value.1, 0, 0, 0, 0]),
        (18, [v, value.1, 0, 0, 0, 0, 0, 0]),
        (19, [x, text.1, 0, 0, 0, 0, 0, 0]),
        (20, [1, io, 1, out, 0, 0, 0, 0]),
        (21, [out, 16, 0, 0, 0, 0, 0, 0]),
        (22, [0, 0, 0, out, 0, 0, 0, 0]),
        (23, [1, out, 0, 0, 0, 0, 0, 0]),
        (24, [out, out + 4, 0, 0, 0, 0, 0, 0]),
        (25, [out, out + 4, 0, 0, 0, 0, 0, 0]),
    ];
    assert_eq!(records.len(), calls);
    seed("host_calls", "every-call", &host_program(&records, &data));
    // One program per call, alone (its pointers into the data moved to where the data is
    // then), and a read that fails.
    let d1 = host_data(1);
    let into_data = d..d + data.len() as i32;
    for (n, record) in records.iter().enumerate() {
        let moved = record.1.map(|a| {
            if into_data.contains(&a) {
                a - d + d1
            } else {
                a
            }
        });
        seed(
            "host_calls",
            &format!("call-{n}"),
            &host_program(&[(record.0, moved)], &data),
        );
    }
    seed(
        "host_calls",
        "read-fails",
        &host_program(&[(7, [d1 + fail.0, fail.1, out, cap, 0, 0, 0, 0])], &data),
    );
}

#[test]
fn the_module_seeds_compile_unless_refused() {
    let sandbox = firn_node::functions::sandbox::Sandbox::new().unwrap();
    for (name, bytes) in seeds("wasm_module") {
        let compiled = sandbox.compile(&bytes);
        let refused = ["unknown-import", "wrong-run-type"].contains(&name.as_str());
        assert_eq!(compiled.is_err(), refused, "wasm_module/{name}");
    }
}

#[test]
fn the_host_call_seeds_do_what_they_say() {
    for (name, bytes) in seeds("host_calls") {
        use firn_node::functions::sandbox::Effect;
        let outcome = firn_fuzz_targets::host_calls::run_program(&bytes);
        match name.as_str() {
            "every-call" => {
                let outcome = outcome.unwrap();
                let kinds: Vec<&str> = outcome
                    .effects
                    .iter()
                    .map(|e| match e {
                        Effect::Put(..) => "put",
                        Effect::Del(..) => "del",
                        Effect::Incr(..) => "incr",
                        Effect::XAdd(..) => "xadd",
                        Effect::Append(..) => "append",
                        Effect::Publish(..) => "publish",
                    })
                    .collect();
                assert_eq!(kinds, ["put", "del", "incr", "xadd", "append", "publish"]);
                assert_eq!(outcome.reply, Some(Bytes::from("21.5")));
                // `log` keeps the line as it is; `fd_write` (stdout) trims its end.
                assert_eq!(outcome.log, ["a line for the log\n", "a line for the log"]);
            }
            "read-fails" => assert!(outcome.is_err(), "{name}"),
            _ => assert!(outcome.is_ok(), "host_calls/{name}: {:?}", outcome.err()),
        }
    }
}

#[test]
fn fd_write_logs_what_the_log_keeps_and_refuses_iovecs_past_the_memory() {
    use firn_model::limits::FUNCTION_LOG_BYTES_MAX;
    let memory = 2 * 65_536;
    let out = 0x100;
    // 1,024 iovecs of 8 bytes, each naming the whole memory: 128 MiB written, of which the
    // log keeps its first 16 KiB, and no more is copied; then the count written is the reply.
    let iovecs: Vec<u8> = (0..1024)
        .flat_map(|_| [0i32.to_le_bytes(), (memory as i32).to_le_bytes()].concat())
        .collect();
    let records = [
        (20, [1, host_data(2), 1024, out, 0, 0, 0, 0]),
        (18, [out, 4, 0, 0, 0, 0, 0, 0]),
    ];
    let outcome =
        firn_fuzz_targets::host_calls::run_program(&host_program(&records, &iovecs)).unwrap();
    assert_eq!(
        outcome.reply,
        Some(Bytes::copy_from_slice(&(1024u32 * memory).to_le_bytes()))
    );
    assert_eq!(outcome.log.len(), 1);
    assert_eq!(outcome.log[0].len(), FUNCTION_LOG_BYTES_MAX);
    // An iovec that runs past the memory, or has a negative length, ends the run.
    for (ptr, len) in [(memory as i32 - 100, 101i32), (0, -1), (-8, 8)] {
        let iovec = [ptr.to_le_bytes(), len.to_le_bytes()].concat();
        let program = host_program(&[(20, [1, host_data(1), 1, out, 0, 0, 0, 0])], &iovec);
        let outcome = firn_fuzz_targets::host_calls::run_program(&program);
        assert!(
            outcome.is_err(),
            "an iovec of {len} bytes at {ptr}: {outcome:?}"
        );
    }
    // The iovecs themselves must lie in the memory.
    let program = host_program(&[(20, [1, memory as i32 - 4, 1, out, 0, 0, 0, 0])], &[]);
    assert!(firn_fuzz_targets::host_calls::run_program(&program).is_err());
}

use super::*;

fn run(wat_text: &str) -> Result<Outcome, FirnError> {
    let sandbox = Sandbox::new()?;
    let compiled = sandbox.compile(&wat::parse_str(wat_text).unwrap())?;
    sandbox.run(&compiled, probe_input(), Box::new(NoReads))
}

#[test]
fn a_module_s_code_is_freed_with_it_not_kept_by_the_sandbox() {
    let sandbox = Sandbox::new().unwrap();
    let module =
        wat::parse_str(r#"(module (func (export "run") (result i32) (i32.const 0)))"#).unwrap();
    let compiled = sandbox.compile(&module).unwrap();
    let again = sandbox.compile(&module).unwrap();
    assert!(!Engine::same(
        compiled.module.engine(),
        again.module.engine()
    ));
    // A run leaves a warm instance behind; dropping the module drops its engine, and with
    // it every function the engine compiled.
    sandbox
        .run(&compiled, probe_input(), Box::new(NoReads))
        .unwrap();
    let engine = compiled.module.engine().weak();
    drop(compiled);
    assert!(
        engine.upgrade().is_none(),
        "the module's engine outlived it"
    );
}

#[test]
fn bytes_that_are_not_wasm_are_refused() {
    let sandbox = Sandbox::new().unwrap();
    let e = sandbox.compile(b"not a module").err().unwrap();
    assert!(e.to_string().contains("not a function module"), "{e}");
}

#[test]
fn an_endless_loop_runs_out_of_fuel() {
    let e = run(r#"(module (func (export "run") (result i32) (loop $l (br $l)) (i32.const 0)))"#)
        .err()
        .unwrap();
    assert!(e.to_string().contains("out of fuel"), "{e}");
}

#[test]
fn a_module_whose_start_function_never_ends_is_refused_once_its_fuel_runs_out() {
    let sandbox = Sandbox::new().unwrap();
    let module = wat::parse_str(
        r#"(module (func $start (loop $l (br $l))) (start $start)
            (func (export "run") (result i32) (i32.const 0)))"#,
    )
    .unwrap();
    let e = sandbox.compile(&module).err().unwrap().to_string();
    assert!(
        e.contains("not a function module") && e.contains("fuel"),
        "{e}"
    );
}

/// A host call handed a pointer or a length outside the guest's memory (or a negative
/// or huge length) ends the run with an error naming it; it never reads or writes past
/// the memory, and the sandbox runs the next module as before.
#[test]
fn a_host_call_given_a_bad_pointer_or_length_ends_the_run() {
    let bad = [
        ("-1", "10"),        // 0xffffffff: past a 64 KiB memory
        ("65530", "100"),    // runs off its end
        ("0", "-1"),         // a negative length
        ("0", "2147483647"), // past any write's limit
    ];
    for (ptr, len) in bad {
        let e = run(&format!(
            r#"(module
                (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
                (memory (export "memory") 1)
                (func (export "run") (result i32)
                    (drop (call $put (i32.const {ptr}) (i32.const {len}) (i32.const 0) (i32.const 1)))
                    (i32.const 0)))"#
        ))
        .err()
        .unwrap_or_else(|| panic!("put({ptr}, {len}) ran"));
        assert!(
            matches!(e, FirnError::FunctionFailed(_)),
            "put({ptr}, {len}): {e}"
        );
    }
    // An answer written where the guest's memory is not: the key runs off its end.
    let sandbox = Sandbox::new().unwrap();
    let module = wat::parse_str(
        r#"(module
            (import "firn" "key" (func $key (param i32 i32 i32) (result i32)))
            (memory (export "memory") 1)
            (func (export "run") (result i32)
                (drop (call $key (i32.const 0) (i32.const 65530) (i32.const 1000)))
                (i32.const 0)))"#,
    )
    .unwrap();
    let input = Invocation {
        keys: vec![Bytes::from("sensors/kitchen/temperature")],
        ..probe_input()
    };
    let e = sandbox
        .run(&sandbox.compile(&module).unwrap(), input, Box::new(NoReads))
        .err()
        .unwrap();
    assert!(e.to_string().contains("guest memory"), "{e}");
    // The same sandbox runs the next module as before: its write comes back.
    let next = wat::parse_str(
        r#"(module
            (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
            (memory (export "memory") 1)
            (data (i32.const 0) "k1v1")
            (func (export "run") (result i32)
                (drop (call $put (i32.const 0) (i32.const 2) (i32.const 2) (i32.const 2)))
                (i32.const 0)))"#,
    )
    .unwrap();
    let outcome = sandbox
        .run(
            &sandbox.compile(&next).unwrap(),
            probe_input(),
            Box::new(NoReads),
        )
        .unwrap();
    assert_eq!(
        outcome.effects,
        vec![Effect::Put(Bytes::from("k1"), Bytes::from("v1"))]
    );
}

#[test]
fn writes_come_back_in_order_and_firn_keys_are_refused() {
    let outcome = run(r#"(module
            (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
            (import "firn" "reply" (func $reply (param i32 i32)))
            (memory (export "memory") 1)
            (data (i32.const 0) "k1v1_firn/x")
            (global $r (mut i32) (i32.const 0))
            (func (export "run") (result i32)
                (drop (call $put (i32.const 0) (i32.const 2) (i32.const 2) (i32.const 2)))
                (global.set $r (call $put (i32.const 4) (i32.const 7) (i32.const 2) (i32.const 2)))
                (i32.store (i32.const 100) (global.get $r))
                (call $reply (i32.const 100) (i32.const 1))
                (i32.const 0)))"#)
    .unwrap();
    assert_eq!(
        outcome.effects,
        vec![Effect::Put(Bytes::from("k1"), Bytes::from("v1"))]
    );
    // -4 (not allowed), its low byte.
    assert_eq!(outcome.reply, Some(Bytes::from(vec![0xfc])));
}

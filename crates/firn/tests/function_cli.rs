//! `firn function` and `firn trigger` against a real node: a module loaded from a file,
//! listed, called with keys and arguments (its reply alone on stdout), deleted; a trigger
//! created, seen copying puts, paused, resumed and dropped; errors on stderr with a failing
//! status.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{FirnProcess, wait_until};

/// Puts its first argument under its first key and replies with it.
const ECHO: &str = include_str!("../../../tests/fixtures/functions/echo.wat");

/// A trigger's function: a put of `in/X` is copied to `out/X`.
const COPY: &str = include_str!("../../../tests/fixtures/functions/copy.wat");

fn firn(node: &FirnProcess, args: &[&str]) -> Output {
    std::process::Command::new(common::firn_bin())
        .args(args)
        .args(["--addr", &node.resp_addr()])
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args`; its stdout, after asserting it succeeded.
fn succeeds(node: &FirnProcess, args: &[&str]) -> String {
    let out = firn(node, args);
    assert!(out.status.success(), "firn {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Runs `args`; its stderr, after asserting it failed.
fn fails(node: &FirnProcess, args: &[&str]) -> String {
    let out = firn(node, args);
    assert!(!out.status.success(), "firn {args:?} succeeded");
    text(&out.stderr)
}

#[test]
fn functions_are_loaded_called_and_run_by_triggers_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &[]);
    let module = |name: &str, wat: &str| {
        let path = dir.path().join(format!("{name}.wasm"));
        std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (echo, copy) = (module("echo", ECHO), module("copy", COPY));

    // The first try that is answered at all (the node may still be electing).
    let mut said = String::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            let out = firn(&node, &["function", "load", "echo", &echo]);
            said = text(&out.stdout) + &text(&out.stderr);
            out.status.success()
        }),
        "{said}"
    );
    assert_eq!(said, "function 'echo' loaded: version 1\n");
    let listed = succeeds(&node, &["function", "list"]);
    assert!(
        listed.starts_with("echo") && listed.contains("version=1"),
        "{listed}"
    );
    let info = succeeds(&node, &["function", "info", "echo"]);
    assert!(info.contains("module_bytes="), "{info}");

    // The reply alone on stdout; the write committed.
    let replied = succeeds(
        &node,
        &["function", "call", "echo", "--key", "greeting", "hello"],
    );
    assert_eq!(replied, "hello\n");
    assert_eq!(succeeds(&node, &["get", "greeting"]), "hello");
    let failed = fails(&node, &["function", "call", "echo"]);
    assert!(failed.contains("function failed"), "{failed}");
    let missing = fails(&node, &["function", "call", "nope"]);
    assert!(missing.contains("function not found: nope"), "{missing}");
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"not a module").unwrap();
    let refused = fails(&node, &["function", "load", "junk", junk.to_str().unwrap()]);
    assert!(refused.contains("not a function module"), "{refused}");

    succeeds(&node, &["function", "load", "copy", &copy]);
    let created = succeeds(
        &node,
        &[
            "trigger",
            "create",
            "copier",
            "--prefix",
            "in/",
            "--call",
            "copy",
            "--retries",
            "1",
        ],
    );
    assert!(created.contains("trigger 'copier' created"), "{created}");
    succeeds(&node, &["put", "in/a", "first"]);
    assert!(
        wait_until(Duration::from_secs(20), || {
            firn(&node, &["get", "out/a"]).stdout == b"first"
        }),
        "the trigger did not copy in/a to out/a"
    );
    let info = succeeds(&node, &["trigger", "info", "copier"]);
    for part in [
        "prefix='in/'",
        "call=copy",
        "from=now",
        "retries=1",
        "running",
    ] {
        assert!(info.contains(part), "{part} in {info}");
    }
    assert!(succeeds(&node, &["trigger", "list"]).starts_with("copier"));

    succeeds(&node, &["trigger", "pause", "copier"]);
    assert!(succeeds(&node, &["trigger", "info", "copier"]).contains("paused"));
    succeeds(&node, &["trigger", "resume", "copier"]);
    succeeds(&node, &["put", "in/b", "second"]);
    assert!(
        wait_until(Duration::from_secs(20), || {
            firn(&node, &["get", "out/b"]).stdout == b"second"
        }),
        "the resumed trigger did not copy in/b"
    );
    // A replay over the last hour, as a trigger of its own.
    let now = firn_model::hlc::system_wall_us();
    let (from, to) = ((now - 3_600_000_000).to_string(), now.to_string());
    let started = succeeds(
        &node,
        &[
            "trigger", "replay", "copier", "--from", &from, "--to", &to, "--into", "again/",
        ],
    );
    assert!(
        started.contains("replay 'copier~replay' started"),
        "{started}"
    );
    assert!(succeeds(&node, &["trigger", "info", "copier~replay"]).contains("copier~replay"));
    succeeds(&node, &["trigger", "drop", "copier~replay"]);
    succeeds(&node, &["trigger", "drop", "copier"]);
    let gone = fails(&node, &["trigger", "info", "copier"]);
    assert!(gone.contains("trigger not found: copier"), "{gone}");
    let bad = fails(
        &node,
        &[
            "trigger", "create", "t", "--prefix", "in/", "--call", "copy@x",
        ],
    );
    assert!(bad.contains("not a version number"), "{bad}");
    // On a log tag: made, and shown with its log and tag.
    let created = succeeds(
        &node,
        &[
            "trigger", "create", "tagged", "--log", "events", "--tag", "hot", "--call", "copy",
        ],
    );
    assert!(
        created.contains("every record of tag 'hot' of log 'events'"),
        "{created}"
    );
    let info = succeeds(&node, &["trigger", "info", "tagged"]);
    assert!(info.contains("log='events' tag='hot'"), "{info}");
    succeeds(&node, &["trigger", "drop", "tagged"]);

    succeeds(&node, &["function", "delete", "echo"]);
    let gone = fails(&node, &["function", "info", "echo"]);
    assert!(gone.contains("function not found: echo"), "{gone}");
}

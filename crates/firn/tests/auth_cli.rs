//! `firn serve --users FILE` as a user runs it: a bad file stops the node before it starts,
//! redis-cli and the `firn` subcommands sign in (`--user/--pass`, `--addr user:pass@host`,
//! `--token`), and without credentials they are refused.

mod common;

use std::process::Command;

use common::{FirnProcess, firn_bin};

const USERS: &str = include_str!("../../../tests/fixtures/users.toml");

fn run(program: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(program).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_bad_users_file_stops_the_node_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.toml");
    std::fs::write(&file, "[users.bob]\nread = [\"x\"]\n").unwrap();
    let (ok, text) = run(
        &firn_bin(),
        &[
            "serve",
            "--users",
            file.to_str().unwrap(),
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--print-config",
        ],
    );
    assert!(!ok);
    assert!(
        text.contains("users.toml") && text.contains("neither a password nor tokens"),
        "{text}"
    );
}

#[test]
fn clients_sign_in_and_are_refused_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.toml");
    std::fs::write(&file, USERS).unwrap();
    let node = FirnProcess::start(
        &dir.path().join("data"),
        &["--users", file.to_str().unwrap()],
    );
    let port = node.resp_port.to_string();
    let signed = format!("alice:wonderland@{}", node.resp_addr());

    // The firn subcommands: RESP credentials in the address, a bearer token over HTTP.
    let (ok, text) = run(&firn_bin(), &["put", "sensor/1", "21", "--addr", &signed]);
    assert!(ok, "{text}");
    let (ok, text) = run(
        &firn_bin(),
        &["get", "sensor/1", "--addr", &node.resp_addr()],
    );
    assert!(!ok && text.contains("NOAUTH"), "{text}");
    let (ok, text) = run(&firn_bin(), &["put", "cfg:mode", "x", "--addr", &signed]);
    assert!(!ok && text.to_uppercase().contains("NOPERM"), "{text}");
    let append = |token: Option<&str>| {
        let mut args = vec![
            "log",
            "append",
            "sensor/log",
            "--tag",
            "t",
            "x",
            "--http-addr",
            &node.http_addr,
        ];
        if let Some(t) = token {
            args.extend(["--token", t]);
        }
        run(&firn_bin(), &args)
    };
    let (ok, text) = append(Some("alice-token"));
    assert!(ok, "{text}");
    let (ok, text) = append(None);
    assert!(!ok && text.contains("NOAUTH"), "{text}");
    let (ok, text) = append(Some("wrong"));
    assert!(!ok && text.contains("WRONGPASS"), "{text}");

    // redis-cli, unchanged.
    let redis_cli = |pass: Option<&str>| {
        let mut args = vec!["-p", &port, "--no-auth-warning"];
        if let Some(p) = pass {
            args.extend(["--user", "alice", "--pass", p]);
        }
        args.extend(["GET", "sensor/1"]);
        run("redis-cli", &args).1
    };
    assert_eq!(redis_cli(Some("wonderland")).trim(), "21");
    assert!(redis_cli(None).contains("NOAUTH"));
    assert!(redis_cli(Some("nope")).contains("WRONGPASS"));
}

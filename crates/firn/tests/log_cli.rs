//! `firn log …` against a real node: append with tags, reads by tag, info, trim, and the
//! errors a user sees (an unknown log, a read below the trim point, a refused `--block-ms 0`)
//! as a message and a failing exit status.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{FirnProcess, wait_until};

fn firn_log(node: &FirnProcess, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_firn"))
        .arg("log")
        .args(args)
        .args(["--http-addr", &node.http_addr])
        .output()
        .unwrap()
}

/// Stdout of a command that must succeed.
fn ok(node: &FirnProcess, args: &[&str]) -> String {
    let out = firn_log(node, args);
    assert!(
        out.status.success(),
        "firn log {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Stderr of a command that must fail.
fn fails(node: &FirnProcess, args: &[&str]) -> String {
    let out = firn_log(node, args);
    assert!(!out.status.success(), "firn log {args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// The first word of each line: the seqs a command printed.
fn seqs(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn the_log_subcommands_append_read_trim_and_report_errors() {
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &["--in-memory"]);
    // Ready when a read gets an answer from the shard: an unknown log's.
    assert!(
        wait_until(Duration::from_secs(20), || {
            String::from_utf8_lossy(&firn_log(&node, &["tail", "clicks", "t"]).stderr)
                .contains("NOLOG")
        }),
        "the node never answered a log read"
    );
    ok(
        &node,
        &[
            "append", "clicks", "--tag", "user/7", "--tag", "home", "a", "b",
        ],
    );
    let appended = ok(&node, &["append", "clicks", "--tag", "user/7", "c"]);
    assert!(appended.contains("  commit "), "{appended}");

    let all = ok(&node, &["range", "clicks", "user/7"]);
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 3, "{all}");
    assert!(lines[0].ends_with("  user/7,home  a"), "{all}");
    assert!(lines[2].ends_with("  user/7  c"), "{all}");
    let s = seqs(&all);
    assert_eq!(seqs(&appended), [s[2].clone()]);

    assert_eq!(
        seqs(&ok(&node, &["next", "clicks", "user/7", "--min", &s[1]])),
        [s[1].clone()]
    );
    assert_eq!(
        seqs(&ok(&node, &["prev", "clicks", "user/7", "--max", &s[1]])),
        [s[1].clone()]
    );
    assert_eq!(
        seqs(&ok(&node, &["tail", "clicks", "home"])),
        [s[1].clone()]
    );
    let page = ok(
        &node,
        &["range", "clicks", "user/7", "--from", &s[1], "--limit", "1"],
    );
    assert_eq!(seqs(&page), [s[1].clone()]);
    let info = ok(&node, &["info", "clicks", "user/7"]);
    assert_eq!(
        info.trim(),
        format!(
            "len 3  first {}  last {}  first_kept 0-0  added 3",
            s[0], s[2]
        )
    );

    assert_eq!(
        ok(
            &node,
            &["trim", "clicks", "--tag", "user/7", "--before", &s[2]]
        )
        .trim(),
        "removed 2"
    );
    let err = fails(&node, &["next", "clicks", "user/7"]);
    assert!(err.contains("TRIMMED") && err.contains(&s[2]), "{err}");
    // A range without --from starts at the first record kept; one from below the trim
    // point is told where that is.
    let kept = ok(&node, &["range", "clicks", "user/7"]);
    assert!(
        kept.starts_with(&s[2]) && kept.lines().count() == 1,
        "{kept}"
    );
    let err = fails(&node, &["range", "clicks", "user/7", "--from", &s[0]]);
    assert!(err.contains("TRIMMED") && err.contains(&s[2]), "{err}");
    let err = fails(&node, &["next", "nolog", "t"]);
    assert!(err.contains("NOLOG") && err.contains("'nolog'"), "{err}");
    let err = fails(
        &node,
        &[
            "next",
            "clicks",
            "user/7",
            "--min",
            &s[2],
            "--block-ms",
            "0",
        ],
    );
    assert!(err.contains("1 to 3600000"), "{err}");
    let err = fails(&node, &["next", "clicks", "user/7", "--min", "x"]);
    assert!(err.contains("invalid seq 'x'"), "{err}");
    let err = fails(
        &node,
        &["next", "clicks", "home", "--min", "99999999999999"],
    );
    assert!(err.contains("clicks/home: no record"), "{err}");
    // The refusals changed nothing.
    assert_eq!(
        seqs(&ok(&node, &["range", "clicks", "user/7", "--from", &s[2]])),
        [s[2].clone()]
    );
}

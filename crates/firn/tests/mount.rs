//! `firn mount DIR`: the file view through FUSE, read by the programs users run — `ls`,
//! `cat`, `md5sum`, `cp -r`, `grep -r`, `tail` — now (following writes) and at a past time
//! (`DIR/@T/…`, `--at`), a prefix alone (`--prefix`), a user who may not read it refused
//! before anything is mounted, and the mount gone when it is interrupted or unmounted.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::mount::{mount, mounted, stop};
use common::{FirnProcess, firn_bin, wait_until};

const USERS: &str = include_str!("../../../tests/fixtures/users.toml");

fn put(node: &FirnProcess, key: &str, value: &[u8]) {
    let answer = ureq::put(&format!("http://{}/v1/kv/{key}", node.http_addr))
        .set("Authorization", "Bearer ops-token")
        .send_bytes(value)
        .unwrap();
    assert_eq!(answer.status(), 200);
}

fn sh(command: &str) -> Output {
    Command::new("sh").args(["-c", command]).output().unwrap()
}

fn stdout(command: &str) -> String {
    let out = sh(command);
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn programs_read_keys_as_files_now_and_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.toml");
    std::fs::write(&users, USERS).unwrap();
    let node = FirnProcess::start(
        &dir.path().join("data"),
        &["--users", users.to_str().unwrap()],
    );
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    for i in 1..=3 {
        put(
            &node,
            &format!("cams/cam{i}"),
            format!("frame {i}\n").as_bytes(),
        );
    }
    put(&node, "cams/deep/x", b"needle in a deep file\n");
    put(&node, "cams/big", &big);
    put(&node, "sensor/1", b"21.5\n");
    std::thread::sleep(Duration::from_millis(20));
    let t = firn_model::hlc::system_wall_us().to_string();
    std::thread::sleep(Duration::from_millis(20));
    put(&node, "cams/cam1", b"frame 1, later\n");

    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let child = mount(&node.http_addr, &mnt, &["--token", "ops-token"]);
    assert_eq!(stdout(&format!("ls {m}")), "cams\nsensor\n");
    assert_eq!(
        stdout(&format!("ls {m}/cams")),
        "big\ncam1\ncam2\ncam3\ndeep\n"
    );
    assert_eq!(stdout(&format!("cat {m}/cams/cam1")), "frame 1, later\n");
    // Sizes and kinds as `ls -l` shows them.
    let long = stdout(&format!("ls -l {m}/cams"));
    assert!(
        long.lines()
            .any(|l| l.starts_with("-r--r--r--") && l.contains(" 3000000 ") && l.ends_with(" big")),
        "{long}"
    );
    assert!(
        long.lines()
            .any(|l| l.starts_with("dr-xr-xr-x") && l.ends_with(" deep")),
        "{long}"
    );
    // A large value byte for byte: md5sum of the mount against the bytes written.
    let local = dir.path().join("big.local");
    std::fs::write(&local, &big).unwrap();
    let digest = |p: &str| stdout(&format!("md5sum < {p}"));
    assert_eq!(
        digest(&format!("{m}/cams/big")),
        digest(local.to_str().unwrap())
    );
    assert_eq!(
        stdout(&format!("grep -r needle {m}/cams")),
        format!("{m}/cams/deep/x:needle in a deep file\n")
    );
    assert_eq!(stdout(&format!("tail -c 6 {m}/cams/cam2")), "ame 2\n");
    let copy = dir.path().join("copy");
    stdout(&format!("cp -r {m}/cams {}", copy.display()));
    assert_eq!(std::fs::read(copy.join("big")).unwrap(), big);
    assert_eq!(
        std::fs::read(copy.join("deep/x")).unwrap(),
        b"needle in a deep file\n"
    );

    // The tree at T: the first frame, no later key; and the live tree follows a write.
    assert_eq!(stdout(&format!("cat {m}/@{t}/cams/cam1")), "frame 1\n");
    put(&node, "cams/cam4", b"frame 4\n");
    put(&node, "cams/cam2", b"frame 2, later\n");
    assert!(
        wait_until(Duration::from_secs(10), || sh(&format!(
            "cat {m}/cams/cam2"
        ))
        .stdout
            == b"frame 2, later\n"),
        "the live tree never showed the new version"
    );
    assert!(stdout(&format!("ls {m}/cams")).contains("cam4"));
    assert!(!stdout(&format!("ls {m}/@{t}/cams")).contains("cam4"));
    assert_eq!(stdout(&format!("cat {m}/@{t}/cams/cam2")), "frame 2\n");
    // Absent and bad paths are absent; nothing can be written.
    assert!(!sh(&format!("cat {m}/cams/nothing")).status.success());
    assert!(!sh(&format!("ls {m}/@yesterday")).status.success());
    let write = sh(&format!("echo x > {m}/cams/new"));
    assert!(!write.status.success());
    assert!(
        String::from_utf8_lossy(&write.stderr).contains("Read-only"),
        "{write:?}"
    );
    stop(child, &mnt);

    // One prefix, pinned at T, by a user who may read it; unmounted from outside.
    let mut child = mount(
        &node.http_addr,
        &mnt,
        &["--token", "ops-token", "--prefix", "cams", "--at", &t],
    );
    assert_eq!(stdout(&format!("ls {m}")), "big\ncam1\ncam2\ncam3\ndeep\n");
    assert_eq!(stdout(&format!("cat {m}/cam1")), "frame 1\n");
    assert!(sh(&format!("umount {m}")).status.success());
    assert!(
        wait_until(Duration::from_secs(20), || child
            .try_wait()
            .unwrap()
            .is_some()),
        "firn mount did not end when unmounted"
    );
    assert!(
        child.wait().unwrap().success(),
        "firn mount failed after an outside umount"
    );

    // A user who may read sensor/ only: that prefix mounts, another is refused before
    // anything is mounted, with the reason.
    let child = mount(
        &node.http_addr,
        &mnt,
        &["--token", "alice-token", "--prefix", "sensor/"],
    );
    assert_eq!(stdout(&format!("cat {m}/1")), "21.5\n");
    stop(child, &mnt);
    let refused = Command::new(firn_bin())
        .arg("mount")
        .arg(&mnt)
        .args([
            "--http-addr",
            &node.http_addr,
            "--token",
            "alice-token",
            "--prefix",
            "cams",
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("may not read 'cams/'"), "{why}");
    assert!(!mounted(&mnt));
    // A bad --at: refused, nothing mounted.
    let bad = Command::new(firn_bin())
        .arg("mount")
        .arg(&mnt)
        .args(["--http-addr", &node.http_addr, "--at", "yesterday"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--at"));
    assert!(!mounted(&mnt));
}

//! `firn mount` as a test runs it: started against a node's HTTP address, waited for until
//! its directory is a mount, and ended with SIGTERM.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{firn_bin, wait_until};

/// Whether `dir` is a mount point now.
pub fn mounted(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(dir.to_str().unwrap()))
}

/// `firn mount DIR --http-addr HTTP_ADDR ARGS…`, waited for until DIR is a mount.
pub fn mount(http_addr: &str, dir: &Path, args: &[&str]) -> Child {
    assert!(
        Path::new("/dev/fuse").exists(),
        "this test mounts through FUSE: /dev/fuse is missing"
    );
    let mut child = Command::new(firn_bin())
        .arg("mount")
        .arg(dir)
        .args(["--http-addr", http_addr])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let up = wait_until(Duration::from_secs(20), || {
        mounted(dir) || child.try_wait().unwrap().is_some()
    });
    assert!(up && mounted(dir), "never mounted: {:?}", child.try_wait());
    child
}

/// Ends `child` with SIGTERM and waits (bounded) for it to end and the mount to go.
pub fn stop(mut child: Child, dir: &Path) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(
        wait_until(Duration::from_secs(20), || child
            .try_wait()
            .unwrap()
            .is_some()),
        "firn mount did not end on SIGTERM"
    );
    assert!(child.wait().unwrap().success());
    assert!(!mounted(dir), "still mounted after firn mount ended");
}

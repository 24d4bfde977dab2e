//! `firn mount DIR`: the node's file view at a time (`/v1/fs`) as a read-only FUSE file
//! system, for any program that reads files — `ls`, `cat`, `cp`, `tail`, `grep -r`,
//! `md5sum`. Keys are files and `/`-separated prefixes directories; `DIR/@T/…` is the whole
//! tree as it was at T; the live tree follows writes (docs/api.md, "Mounting the file
//! view"). It runs until interrupted (Ctrl-C, SIGTERM) or unmounted (`umount DIR`).

mod fs;
mod remote;
mod tree;

use std::path::{Path, PathBuf};

use clap::Args;

use self::remote::{Failure, Remote};
use crate::http::HttpTarget;

#[derive(Args)]
pub struct MountArgs {
    /// An empty directory to mount on.
    dir: PathBuf,
    /// Show the tree as it was at this time (µs, RFC 3339, or WALL-LOGICAL) instead of now.
    #[arg(long)]
    at: Option<String>,
    /// Show only the keys under this prefix (a directory: a `/` is added when it lacks one).
    #[arg(long)]
    prefix: Option<String>,
    #[command(flatten)]
    http: HttpTarget,
}

/// Where FUSE's device is; without it nothing can be mounted.
const FUSE_DEVICE: &str = "/dev/fuse";

pub async fn mount(args: MountArgs) -> Result<(), String> {
    if !Path::new(FUSE_DEVICE).exists() {
        return Err(format!(
            "mounting needs FUSE, and {FUSE_DEVICE} is missing: load the kernel's fuse module \
             (modprobe fuse), or run the container with --device {FUSE_DEVICE}; the same tree \
             is readable over HTTP at /v1/fs/"
        ));
    }
    if !args.dir.is_dir() {
        return Err(format!("{}: not a directory", args.dir.display()));
    }
    let at = args
        .at
        .as_deref()
        .map(firn_model::time::parse_read_time)
        .transpose()
        .map_err(|e| format!("--at: {e}"))?
        .map(|t| t.to_string());
    let prefix = match args.prefix {
        Some(p) if !p.is_empty() && !p.ends_with('/') => format!("{p}/"),
        Some(p) => p,
        None => String::new(),
    };
    // Before mounting: the node answers, and the user may read the prefix.
    let remote = Remote::new(args.http.clone());
    let probe = {
        let (prefix, at) = (prefix.clone(), at.clone());
        tokio::task::spawn_blocking(move || remote.list(&prefix, at.as_deref()).map(|_| remote))
            .await
            .map_err(|e| e.to_string())?
    };
    let remote = match probe {
        Ok(remote) => remote,
        // An empty prefix is a directory still (it shows what is written under it later).
        Err(Failure::NotFound) => Remote::new(args.http.clone()),
        Err(Failure::Denied(why)) => {
            return Err(format!("may not read '{prefix}' on the node: {why}"));
        }
        Err(Failure::Other(why)) => {
            return Err(format!(
                "the node at {} did not answer: {why}",
                args.http.http_addr
            ));
        }
    };
    let filesystem = fs::FirnFs::new(remote, prefix.clone(), at.clone());
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::RO,
        fuser::MountOption::FSName(format!("firn:{}", args.http.http_addr)),
        fuser::MountOption::Subtype("firn".into()),
        fuser::MountOption::NoAtime,
    ];
    let session = fuser::spawn_mount(filesystem, &args.dir, &config).map_err(|e| {
        format!(
            "mounting on {}: {e} (as a user other than root, FUSE's fusermount3 must be \
             installed: Debian's fuse3)",
            args.dir.display()
        )
    })?;
    let what = if prefix.is_empty() {
        "every key".to_string()
    } else {
        format!("the keys under '{prefix}'")
    };
    let when = match &at {
        Some(t) => format!("as they were at {t}"),
        None => "now, following writes".to_string(),
    };
    eprintln!(
        "firn: {} shows {what} read-only, {when}; Ctrl-C or `umount {}` ends it",
        args.dir.display(),
        args.dir.display()
    );
    // Ends when interrupted, or when someone unmounts it (the session's thread then ends).
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    let unmounter = std::sync::Arc::new(std::sync::Mutex::new(Some(session)));
    let watched = unmounter.clone();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let finished = watched
                .lock()
                .ok()
                .and_then(|s| s.as_ref().map(|s| s.guard.is_finished()))
                .unwrap_or(true);
            if finished {
                let _ = ended_tx.send(());
                return;
            }
        }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let unmounted_outside = tokio::select! {
        _ = tokio::signal::ctrl_c() => false,
        _ = term.recv() => false,
        _ = ended_rx => true,
    };
    let session = unmounter.lock().ok().and_then(|mut s| s.take());
    match session {
        // Unmounted already (`umount DIR`): only the session's thread to collect.
        Some(session) if unmounted_outside => session.join(),
        Some(session) => session.umount_and_join(),
        None => Ok(()),
    }
    .map_err(|e| format!("unmounting {}: {e}", args.dir.display()))
}

//! `firn put KEY --file PATH` and `firn get KEY --output PATH`: a value of any size up to
//! the HTTP limit, streamed between a file and a node's HTTP API (never whole in memory),
//! with a progress bar on a terminal.

use std::fs::File;
use std::io::{self, IsTerminal};
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};

use crate::http::{HttpTarget, failed};

fn bar(len: u64) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes}  {bytes_per_sec}  eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// Writes the file's bytes as a new version of `key`; answers the version line.
pub fn put_file(
    target: &HttpTarget,
    key: &str,
    path: &Path,
    if_version: Option<u64>,
    event_time: Option<&str>,
) -> Result<String, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let mut request = target
        .request("PUT", &target.url(key))
        .set("Content-Length", &len.to_string());
    if let Some(v) = if_version {
        request = request.query("if_version", &v.to_string());
    }
    if let Some(t) = event_time {
        request = request.query("event_time", t);
    }
    let progress = bar(len);
    let answer = request.send(progress.wrap_read(file)).map_err(failed)?;
    progress.finish_and_clear();
    let json: serde_json::Value = answer.into_json().map_err(|e| e.to_string())?;
    Ok(format!(
        "version {}  commit {}  ({len} bytes)",
        json["version"],
        json["commit_ts"].as_str().unwrap_or_default()
    ))
}

/// Reads `key` (at `query`: version, as_of or event_time) into the file at `path`.
pub fn get_file(
    target: &HttpTarget,
    key: &str,
    query: &[(&str, String)],
    path: &Path,
) -> Result<String, String> {
    let mut request = target.request("GET", &target.url(key));
    for (name, value) in query {
        request = request.query(name, value);
    }
    let answer = request.call().map_err(|e| match e {
        ureq::Error::Status(404, _) => format!("{key}: not found"),
        other => failed(other),
    })?;
    let len = answer
        .header("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let version = answer.header("firn-version").unwrap_or("?").to_string();
    let mut file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let progress = bar(len);
    let copied = io::copy(&mut progress.wrap_read(answer.into_reader()), &mut file)
        .map_err(|e| format!("reading {key}: {e}"))?;
    progress.finish_and_clear();
    if len > 0 && copied != len {
        return Err(format!(
            "{key}: the answer ended after {copied} of {len} bytes"
        ));
    }
    file.sync_all()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(format!(
        "version {version}  ({copied} bytes to {})",
        path.display()
    ))
}

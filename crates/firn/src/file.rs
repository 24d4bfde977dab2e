//! `firn put KEY --file PATH` and `firn get KEY --output PATH`: a value of any size up to
//! the HTTP limit, streamed between a file and a node's HTTP API (never whole in memory),
//! with a progress bar on a terminal.

use std::fs::File;
use std::io::{self, IsTerminal};
use std::path::Path;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Where a file travels to or from.
#[derive(Args, Clone)]
pub struct HttpTarget {
    /// HTTP address of the node (`--file` and `--output` travel over HTTP).
    #[arg(long, env = "FIRN_HTTP_ADDR", default_value = "127.0.0.1:7380")]
    http_addr: String,
}

/// A key in a URL path: every byte but letters, digits, `-._~` and `/` escaped.
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// How long a transfer may stall before it is given up.
const STALL: Duration = Duration::from_secs(120);

impl HttpTarget {
    fn url(&self, key: &str) -> String {
        format!(
            "http://{}/v1/kv/{}",
            self.http_addr,
            utf8_percent_encode(key, PATH)
        )
    }

    /// A JSON answer of `GET path?query`.
    pub fn get_json(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<serde_json::Value, String> {
        let mut request = agent().get(&format!("http://{}{path}", self.http_addr));
        for (name, value) in query {
            request = request.query(name, value);
        }
        request
            .call()
            .map_err(failed)?
            .into_json()
            .map_err(|e| e.to_string())
    }

    /// Copies `key`'s value (at `query`) into `out`; answers the bytes copied.
    pub fn get_value(
        &self,
        key: &str,
        query: &[(&str, String)],
        out: &mut impl io::Write,
    ) -> Result<u64, String> {
        let mut request = agent().get(&self.url(key));
        for (name, value) in query {
            request = request.query(name, value);
        }
        let answer = request.call().map_err(failed)?;
        io::copy(&mut answer.into_reader(), out).map_err(|e| format!("reading {key}: {e}"))
    }

    /// Writes `size` bytes from `value` as a new version of `key`.
    pub fn put_value(
        &self,
        key: &str,
        event_time_us: Option<u64>,
        size: u64,
        value: impl io::Read,
    ) -> Result<(), String> {
        let mut request = agent()
            .put(&self.url(key))
            .set("Content-Length", &size.to_string());
        if let Some(t) = event_time_us {
            request = request.query("event_time", &t.to_string());
        }
        request
            .send(value)
            .map(|_| ())
            .map_err(|e| format!("{key}: {}", failed(e)))
    }
}

/// No bound on a whole transfer (a large file takes long), only on a stall.
fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_read(STALL)
        .timeout_write(STALL)
        .build()
}

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

fn failed(e: ureq::Error) -> String {
    match e {
        ureq::Error::Status(code, r) => {
            let body = r.into_string().unwrap_or_default();
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|j| j["message"].as_str().map(str::to_string))
                .unwrap_or(body);
            format!("{code}: {message}")
        }
        other => other.to_string(),
    }
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
    let mut request = agent()
        .put(&target.url(key))
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
    let mut request = agent().get(&target.url(key));
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

//! The node's HTTP API as the client subcommands reach it: its address (`--http-addr`,
//! `FIRN_HTTP_ADDR`), on a node with users the bearer token every call carries (`--token`,
//! `FIRN_TOKEN`), and on a node with TLS the CA its certificate is checked against (`firn
//! --ca PATH`, `FIRN_CA`: then RESP and HTTP both go over TLS; see [`set_client_tls`]).

use std::io;
use std::time::Duration;

use clap::Args;
use std::sync::OnceLock;

use firn_client::{GroupClient, LogClient, TlsCa};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// The node a subcommand talks to over HTTP.
#[derive(Args, Clone)]
pub struct HttpTarget {
    /// HTTP address of the node (the log, groups, `--file`, `--output`, backups).
    #[arg(
        long,
        env = "FIRN_HTTP_ADDR",
        default_value = "127.0.0.1:7380",
        global = true
    )]
    pub http_addr: String,
    /// Bearer token for a node with users (`firn serve --users`).
    #[arg(long, env = "FIRN_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
}

/// A key in a URL path: every byte but letters, digits, `-._~` and `/` escaped.
pub(crate) const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// This process's TLS to the node: set once from `--ca` before any subcommand runs.
static CLIENT_TLS: OnceLock<TlsCa> = OnceLock::new();

/// Makes every later connection of this process (RESP and HTTP) use TLS with `ca`.
pub fn set_client_tls(ca: TlsCa) {
    let _ = CLIENT_TLS.set(ca);
}

/// The CA the node's certificate is checked against; none: plain text.
pub fn client_tls() -> Option<&'static TlsCa> {
    CLIENT_TLS.get()
}

fn scheme() -> &'static str {
    if client_tls().is_some() {
        "https"
    } else {
        "http"
    }
}

/// How long a transfer may stall before it is given up.
const STALL: Duration = Duration::from_secs(120);

impl HttpTarget {
    /// A client of the node's log endpoints, signed with the token.
    pub fn log_client(&self) -> LogClient {
        LogClient::new(&self.http_addr)
            .with_tls(client_tls())
            .with_bearer(self.token.clone())
    }

    /// A client of the node's consumer-group endpoints, signed with the token.
    pub fn group_client(&self) -> GroupClient {
        GroupClient::sharing(&self.log_client())
    }

    /// A request to `url`, signed with the token.
    pub fn request(&self, method: &str, url: &str) -> ureq::Request {
        let request = agent().request(method, url);
        match &self.token {
            Some(t) => request.set("Authorization", &format!("Bearer {t}")),
            None => request,
        }
    }

    /// `http(s)://ADDR`, the start of every URL.
    pub fn base(&self) -> String {
        format!("{}://{}", scheme(), self.http_addr)
    }

    pub fn url(&self, key: &str) -> String {
        format!(
            "{}://{}/v1/kv/{}",
            scheme(),
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
        let mut request = self.request("GET", &format!("{}://{}{path}", scheme(), self.http_addr));
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
        let mut request = self.request("GET", &self.url(key));
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
        let mut request = self
            .request("PUT", &self.url(key))
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
    let builder = ureq::AgentBuilder::new()
        .timeout_read(STALL)
        .timeout_write(STALL);
    match client_tls() {
        Some(ca) => builder.tls_config(ca.http_config()).build(),
        None => builder.build(),
    }
}

pub fn failed(e: ureq::Error) -> String {
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

//! `firn request SERVICE PAYLOAD`: one request to a service's workers (FIRN.REQUEST over
//! RESP); prints the reply.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use super::Target;

#[derive(Args)]
pub struct RequestArgs {
    /// The service's name (its workers serve it with FIRN.SERVE).
    service: String,
    /// The request's payload, as text.
    payload: String,
    /// The request's key: an hrw service gives requests with one key to one worker.
    #[arg(long)]
    key: Option<String>,
    /// How long to wait for the reply (1 to 3600000; the server's default is 5000).
    #[arg(long)]
    timeout_ms: Option<u64>,
    #[command(flatten)]
    target: Target,
}

pub async fn run_request(args: RequestArgs) -> Result<(), String> {
    let addr = &args.target.addr;
    let client = redis::Client::open(format!("redis://{addr}/")).map_err(|e| e.to_string())?;
    // The answer may take the whole timeout: the client waits a little longer than that.
    let waits_ms = args.timeout_ms.unwrap_or(5_000).saturating_add(5_000);
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_millis(waits_ms)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| crate::unreachable_error(addr, e))?;
    let mut cmd = redis::cmd("FIRN.REQUEST");
    cmd.arg(&args.service).arg(&args.payload);
    if let Some(k) = &args.key {
        cmd.arg("KEY").arg(k);
    }
    if let Some(ms) = args.timeout_ms {
        cmd.arg("TIMEOUT").arg(ms);
    }
    let reply: Vec<u8> =
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| match (e.code(), e.detail()) {
                (Some(code), Some(detail)) => format!("{code} {detail}"),
                _ => e.to_string(),
            })?;
    let mut out = std::io::stdout().lock();
    out.write_all(&reply)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(|e| e.to_string())
}

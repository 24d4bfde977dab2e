//! Fault points: named moments where a test makes a node fail on purpose — a coordinator
//! that dies between two steps of a transaction, say — with tikv's `fail` crate. They do
//! nothing unless the `FAIL_POINTS` environment variable names them when the node starts
//! (`FAIL_POINTS='txn-after-prepare=return'`); each point says what `return` does there.
//!
//! The points:
//! - `txn-after-prepare`: a coordinator aborts the process (as kill -9) once every part of
//!   a transaction across shards is prepared, before the anchor decides.
//! - `txn-after-decide`: a coordinator aborts the process once the anchor has decided,
//!   before the other parts are resolved.
//! - `function-read`: a function's read (of a key, a prefix or a log tag) answers
//!   `TRYAGAIN`, as when its shard's leader cannot be reached.

/// Reads `FAIL_POINTS`, if set. A setting the crate cannot parse is refused.
pub fn from_env() -> Result<(), String> {
    let Ok(points) = std::env::var("FAIL_POINTS") else {
        return Ok(());
    };
    for point in points.split(';').filter(|p| !p.trim().is_empty()) {
        let (name, actions) = point
            .split_once('=')
            .ok_or_else(|| format!("FAIL_POINTS: '{point}' is not NAME=ACTIONS"))?;
        fail::cfg(name.trim(), actions.trim())
            .map_err(|e| format!("FAIL_POINTS: '{point}': {e}"))?;
        tracing::warn!("fault point {name} is set: {actions}");
    }
    Ok(())
}

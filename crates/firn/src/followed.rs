//! `firn cluster status`'s line about a shard's last follow move (the `followed` field of a
//! shard in `FIRN.CLUSTER STATUS`): when, from where, to where, and why. Display only.

use serde_json::{Map, Value};

/// "leader moved from node 1 to node 2 4 s ago: node 2 sent 87% of its requests".
pub fn followed_line(f: &Map<String, Value>) -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let ago_s = now_ms.saturating_sub(f["at_ms"].as_u64().unwrap_or(now_ms)) / 1_000;
    let node = |v: &Value| v.as_u64().map_or("?".into(), |n| format!("node {n}"));
    let why = match &f["why"] {
        Value::Object(w) if w.contains_key("Pin") => format!("pinned to {}", node(&w["Pin"])),
        Value::Object(w) => format!(
            "{} sent {}% of its requests",
            node(&w["Follow"]["node"]),
            w["Follow"]["share_pct"]
        ),
        other => other.to_string(),
    };
    let to = node(&f["to"]);
    match f["step"].as_str() {
        Some("replica") => {
            let off = match f["from"].as_u64() {
                Some(n) => format!(" (instead of node {n})"),
                None => String::new(),
            };
            format!(
                "follows its clients: replica added on {to}{off} {ago_s} s ago, the leader goes there next: {why}"
            )
        }
        _ => format!(
            "follows its clients: leader moved from {} to {to} {ago_s} s ago: {why}",
            node(&f["from"])
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_move_and_a_pin_read_as_sentences() {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            - 4_000;
        let f = serde_json::json!({"at_ms": at, "step": "leader", "from": 1, "to": 2,
            "why": {"Follow": {"node": 2, "share_pct": 87}}});
        assert_eq!(
            followed_line(f.as_object().unwrap()),
            "follows its clients: leader moved from node 1 to node 2 4 s ago: node 2 sent 87% of its requests"
        );
        let p = serde_json::json!({"at_ms": at, "step": "replica", "from": 3, "to": 2,
            "why": {"Pin": 2}});
        assert!(followed_line(p.as_object().unwrap()).ends_with("pinned to node 2"));
    }
}

//! Every JSON body a route takes, read as its route reads it — decoded, then checked into
//! the typed request the route runs — without a server or a router. The fuzzer (and the
//! corpus replay in `cargo test`) feeds bodies through here; the routes call the same
//! methods.

use serde::de::DeserializeOwned;

use super::admin::KeyspaceBody;
use super::functions::{CallBody, ReplayBody, TimerBody, TriggerBody};
use super::groups::{AckBody, AutoClaimBody, ClaimBody, CreateBody, ReadBody};
use super::kv::TruncateBody;
use super::log::AppendBody;
use super::twin::TwinPatchBody;
use super::txn::TxnBody;
use super::watermark::{AdvanceBody, PolicyBody};

/// The routes that take a JSON body, by the name the corpus files are kept under.
pub const ROUTES: [&str; 16] = [
    "txn",
    "log_append",
    "trigger",
    "trigger_replay",
    "timer",
    "function_call",
    "watermark_advance",
    "watermark_policy",
    "keyspace",
    "truncate",
    "twin_patch",
    "group_create",
    "group_read",
    "group_ack",
    "group_claim",
    "group_autoclaim",
];

/// Reads `body` as the route `ROUTES[route]` reads its body: `Err` with the error the
/// route would answer (the JSON's, or the check's), `Ok` for one it would run. A route
/// index past the end is the last's.
pub fn read(route: usize, body: &[u8]) -> Result<(), String> {
    fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }
    let checked = |r: Result<(), firn_model::FirnError>| r.map_err(|e| e.to_string());
    match route.min(ROUTES.len() - 1) {
        0 => checked(json::<TxnBody>(body)?.into_write().map(drop)),
        1 => checked(
            json::<AppendBody>(body)?
                .into_write("events".into())
                .map(drop),
        ),
        2 => checked(json::<TriggerBody>(body)?.into_spec().map(drop)),
        3 => checked(json::<ReplayBody>(body)?.into_request("t".into()).map(drop)),
        4 => checked(json::<TimerBody>(body)?.into_spec().map(drop)),
        5 => checked(json::<CallBody>(body)?.into_request("f".into()).map(drop)),
        6 => checked(json::<AdvanceBody>(body)?.to_us().map(drop)),
        7 => checked(json::<PolicyBody>(body)?.into_policy().map(drop)),
        8 => checked(json::<KeyspaceBody>(body)?.into_def().map(drop)),
        9 => checked(json::<TruncateBody>(body)?.into_write().map(drop)),
        10 => checked(
            json::<TwinPatchBody>(body)?
                .into_request("devices/d1".into())
                .map(drop),
        ),
        11 => checked(json::<CreateBody>(body)?.into_change().map(drop)),
        12 => checked(json::<ReadBody>(body)?.checked().map(drop)),
        13 => checked(json::<AckBody>(body)?.into_change().map(drop)),
        14 => checked(json::<ClaimBody>(body)?.into_change().map(drop)),
        _ => checked(json::<AutoClaimBody>(body)?.into_change().map(drop)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each route's reader is the one named: a body one route takes, another refuses.
    #[test]
    fn each_route_reads_its_own_body() {
        let bodies: [&[u8]; 16] = [
            br#"{"then":[{"op":"put","key":"a","value":"1"}]}"#,
            br#"{"records":[{"tags":["t"],"value":"v"}]}"#,
            br#"{"name":"t","prefix":"in/","function":"f"}"#,
            br#"{"from":"0","to":"1000","into":"replay/"}"#,
            br#"{"name":"t","in_ms":1000,"function":"f"}"#,
            br#"{"keys":["a"],"args":["x"]}"#,
            br#"{"prefix":"p/","to":1000}"#,
            br#"{"prefix":"p/","lateness":"5s","late":"refuse"}"#,
            br#"{"prefix":"p/","mode":"versioned","ttl":"90s"}"#,
            br#"{"key":"a","before_version":3}"#,
            br#"{"desired":{"temp":21}}"#,
            br#"{"group":"g","start":"0","policy":"hrw","key_field":"dev"}"#,
            br#"{"consumer":"c","count":10}"#,
            br#"{"ids":["1-1"]}"#,
            br#"{"consumer":"c","min_idle_ms":0,"ids":["1-1"]}"#,
            br#"{"consumer":"c","min_idle_ms":100,"start":"0"}"#,
        ];
        for (route, body) in bodies.iter().enumerate() {
            assert_eq!(read(route, body), Ok(()), "{}", ROUTES[route]);
            let other = (route + 1) % ROUTES.len();
            assert!(
                read(other, body).is_err(),
                "{} took {}'s body",
                ROUTES[other],
                ROUTES[route]
            );
        }
        let e = read(9, br#"{"key":"a","prefix":"b","before_version":3}"#).unwrap_err();
        assert!(e.contains("exactly one of key, prefix"), "{e}");
        assert!(read(0, b"{").is_err());
    }
}

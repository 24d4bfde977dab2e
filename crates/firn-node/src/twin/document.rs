//! A twin's document: a JSON object, merged into by a JSON merge patch (RFC 7396, the
//! `json-patch` crate's) and compared with the other side for the delta.

use bytes::Bytes;
use firn_model::{FirnError, KeyKind, TwinName, TwinSide, VersionInfo};
use serde_json::{Map, Value};

/// A JSON object: a twin's desired or reported state, or a patch of one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Document(Map<String, Value>);

impl Document {
    /// A patch as a client sent it: a JSON object (`null` members remove).
    pub fn patch(bytes: &[u8]) -> Result<Self, FirnError> {
        match serde_json::from_slice(bytes) {
            Ok(Value::Object(members)) => Ok(Document(members)),
            Ok(_) => Err(FirnError::BadArgument(
                "a twin patch is a JSON object (a JSON merge patch: members to set, null to \
                 remove one)"
                    .into(),
            )),
            Err(e) => Err(FirnError::BadArgument(format!(
                "a twin patch is a JSON object; this is not JSON: {e}"
            ))),
        }
    }

    /// The document a version of `twin`'s `side` holds: none, or a tombstone, is `{}`.
    pub fn of_version(
        twin: &TwinName,
        side: TwinSide,
        version: Option<&VersionInfo>,
    ) -> Result<Self, FirnError> {
        let Some(version) = version.filter(|v| !v.deleted) else {
            return Ok(Document::default());
        };
        let not_a_document = |what: &str| {
            FirnError::BadArgument(format!(
                "key '{}' holds {what}, not a twin document (a JSON object)",
                String::from_utf8_lossy(twin.key(side).bytes())
            ))
        };
        if version.kind != KeyKind::String {
            return Err(not_a_document("no string"));
        }
        let Some(value) = &version.value else {
            return Err(not_a_document("a value kept beside the log"));
        };
        match serde_json::from_slice(value) {
            Ok(Value::Object(members)) => Ok(Document(members)),
            Ok(_) => Err(not_a_document("JSON that is no object")),
            Err(_) => Err(not_a_document("a value that is not JSON")),
        }
    }

    /// Applies a merge patch.
    pub fn merge(&mut self, patch: &Document) {
        let mut whole = Value::Object(std::mem::take(&mut self.0));
        json_patch::merge(&mut whole, &Value::Object(patch.0.clone()));
        if let Value::Object(members) = whole {
            self.0 = members;
        }
    }

    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(&self.0).expect("a JSON map always serializes"))
    }
}

/// Every member of `desired` that `reported` lacks or holds another value for; objects
/// compared member by member, numbers by value (`21` is `21.0`).
pub fn delta(desired: &Document, reported: &Document) -> Document {
    Document(members_differing(&desired.0, &reported.0))
}

fn members_differing(
    desired: &Map<String, Value>,
    reported: &Map<String, Value>,
) -> Map<String, Value> {
    desired
        .iter()
        .filter_map(|(name, want)| {
            let differs = match (want, reported.get(name)) {
                (Value::Object(want), Some(Value::Object(have))) => {
                    let inner = members_differing(want, have);
                    return (!inner.is_empty()).then(|| (name.clone(), Value::Object(inner)));
                }
                (want, Some(have)) => !same(want, have),
                (_, None) => true,
            };
            differs.then(|| (name.clone(), want.clone()))
        })
        .collect()
}

/// JSON equality with numbers compared by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(name, v)| y.get(name).is_some_and(|w| same(v, w)))
        }
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc(v: Value) -> Document {
        Document::patch(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_merge_patch_sets_replaces_and_removes_members_as_rfc_7396_says() {
        let mut d = doc(json!({"a": "b", "c": {"d": "e", "f": "g"}, "n": [1, 2]}));
        d.merge(&doc(
            json!({"a": "z", "c": {"f": null}, "n": [3], "new": true}),
        ));
        assert_eq!(
            d,
            doc(json!({"a": "z", "c": {"d": "e"}, "n": [3], "new": true}))
        );
    }

    #[test]
    fn the_delta_is_what_desired_wants_that_reported_does_not_have() {
        let desired = doc(json!({
            "temp": 21, "mode": "eco", "fw": {"version": "2.1", "channel": "stable"},
            "led": [1, 2], "same": {"x": 1}
        }));
        let reported = doc(json!({
            "temp": 21.0, "mode": "boost", "fw": {"version": "2.0", "channel": "stable"},
            "led": [1, 2], "same": {"x": 1}, "uptime": 50
        }));
        assert_eq!(
            delta(&desired, &reported),
            doc(json!({"mode": "eco", "fw": {"version": "2.1"}}))
        );
        assert_eq!(delta(&desired, &desired), Document::default());
        assert_eq!(delta(&desired, &Document::default()), desired);
        // An object wanted where the device reports something else: the whole object.
        let flat = doc(json!({"fw": "2.0"}));
        assert_eq!(
            delta(&doc(json!({"fw": {"version": "2.1"}})), &flat),
            doc(json!({"fw": {"version": "2.1"}}))
        );
    }

    #[test]
    fn a_patch_that_is_not_a_json_object_is_refused() {
        for bad in [&b"[1]"[..], b"3", b"null", b"{", b"\"x\"", b""] {
            let err = Document::patch(bad).unwrap_err();
            assert!(err.to_string().contains("twin patch"), "{err}");
        }
    }
}

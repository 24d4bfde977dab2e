//! Topics and filters as MQTT defines them, and how they map to keys: the topic `T` is the
//! key `P T` (`P`: `--mqtt-prefix`), a filter (`+` one level, `#` the rest) a set of those
//! keys, found by a glob prefilter on channels and then MQTT's own matching rules.

use bytes::Bytes;

/// Why a topic name (in a PUBLISH) is refused.
pub fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("a topic name is at least one character".into());
    }
    if topic.contains(['+', '#']) {
        return Err(format!("'{topic}': a topic name has no wildcards (+, #)"));
    }
    if topic.contains('\0') {
        return Err("a topic name has no NUL character".into());
    }
    Ok(())
}

/// Why a topic filter (in a SUBSCRIBE) is refused: `#` only as the whole last level, `+`
/// only as a whole level.
pub fn check_filter(filter: &str) -> Result<(), String> {
    if filter.is_empty() {
        return Err("a topic filter is at least one character".into());
    }
    if filter.contains('\0') {
        return Err("a topic filter has no NUL character".into());
    }
    let levels: Vec<&str> = filter.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        let whole = level.len() == 1;
        if level.contains('#') && !(whole && i == levels.len() - 1) {
            return Err(format!("'{filter}': # is the whole last level of a filter"));
        }
        if level.contains('+') && !whole {
            return Err(format!("'{filter}': + is a whole level of a filter"));
        }
    }
    Ok(())
}

/// Whether `topic` matches `filter`, by MQTT's rules (a wildcard at the first level does not
/// match a topic that starts with `$`).
pub fn matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(fl), Some(tl)) if fl == tl => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// What every topic a filter matches starts with: the levels before its first wildcard
/// (for `a/b/#`, `a/b` — which `a/b/#` matches too).
pub fn fixed_prefix(filter: &str) -> &str {
    match filter.find(['+', '#']) {
        Some(at) => {
            let before = &filter[..at];
            if filter[at..].starts_with('#') {
                before.strip_suffix('/').unwrap_or(before)
            } else {
                before
            }
        }
        None => filter,
    }
}

/// The channel glob (Redis's pattern syntax) that every channel of a topic `filter` matches,
/// under the key prefix `prefix`: a superset, narrowed by [`matches`].
pub fn channel_glob(prefix: &str, filter: &str) -> Bytes {
    let fixed = fixed_prefix(filter);
    let mut glob = String::with_capacity(prefix.len() + fixed.len() + 2);
    for c in prefix.chars().chain(fixed.chars()) {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            glob.push('\\');
        }
        glob.push(c);
    }
    if fixed.len() < filter.len() {
        glob.push('*');
    }
    Bytes::from(glob)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_topics_by_mqtts_rules() {
        for (filter, topic, want) in [
            ("a/b", "a/b", true),
            ("a/b", "a/b/c", false),
            ("a/+", "a/b", true),
            ("a/+", "a/b/c", false),
            ("a/+/c", "a/b/c", true),
            ("a/#", "a", true),
            ("a/#", "a/b/c", true),
            ("a/#", "ab", false),
            ("#", "a/b", true),
            ("+/+", "/x", true),
            ("+", "$SYS", false),
            ("#", "$SYS/x", false),
            ("$SYS/#", "$SYS/x", true),
            ("a//b", "a//b", true),
        ] {
            assert_eq!(matches(filter, topic), want, "{filter} ~ {topic}");
        }
    }

    #[test]
    fn bad_topics_and_filters_are_refused() {
        for t in ["", "a/+", "a/#", "a\0b"] {
            assert!(check_topic(t).is_err(), "{t:?}");
        }
        assert!(check_topic("a/b c/d").is_ok());
        for f in ["", "a/#/b", "a#", "a/b+", "+a", "a\0"] {
            assert!(check_filter(f).is_err(), "{f:?}");
        }
        for f in ["#", "+", "a/+/b", "a/#", "+/#", "/", "a//b"] {
            assert!(check_filter(f).is_ok(), "{f:?}");
        }
    }

    #[test]
    fn a_filters_glob_and_fixed_prefix_cover_every_topic_it_matches() {
        assert_eq!(fixed_prefix("a/b/#"), "a/b");
        assert_eq!(fixed_prefix("a/+/c"), "a/");
        assert_eq!(fixed_prefix("a/b"), "a/b");
        assert_eq!(channel_glob("mqtt/", "a/b"), Bytes::from("mqtt/a/b"));
        assert_eq!(channel_glob("mqtt/", "a/#"), Bytes::from("mqtt/a*"));
        assert_eq!(channel_glob("mqtt/", "x*y/+"), Bytes::from("mqtt/x\\*y/*"));
        for (filter, topic) in [
            ("a/#", "a"),
            ("a/#", "a/b/c"),
            ("+/x", "q/x"),
            ("x*y/+", "x*y/z"),
        ] {
            let glob = channel_glob("mqtt/", filter);
            let channel = format!("mqtt/{topic}");
            assert!(
                firn_store::glob::glob_match(&glob, channel.as_bytes()),
                "{glob:?} ~ {channel}"
            );
        }
    }
}

//! `Range: bytes=…` on a value of a known size (RFC 9110, section 14): one range is
//! answered (206); a range that starts past the end is refused (416); a header that is not
//! one byte range (several ranges, another unit, bad syntax) is ignored and the whole value
//! answered, as the RFC lets a server do. `If-None-Match` naming the value's tag answers it
//! is not modified (304); `If-Range` naming another tag answers the whole value.

use axum::http::{HeaderMap, header};

/// What part of a value a request asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The client holds this version already.
    NotModified,
    Whole,
    /// Bytes `start..end` (`end` exclusive).
    Part {
        start: u64,
        end: u64,
    },
    /// A range that holds no byte of the value.
    Unsatisfiable,
}

/// What a read of a value of `size` bytes whose tag is `etag` asks for, by its
/// `If-None-Match`, `If-Range` and `Range` headers.
pub fn asked(headers: &HeaderMap, etag: &str, size: u64) -> Wanted {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if text(header::IF_NONE_MATCH).is_some_and(|tags| matches_etag(tags, etag)) {
        return Wanted::NotModified;
    }
    // `If-Range` names the version the client holds part of: another answers whole.
    match text(header::IF_RANGE) {
        Some(tag) if tag.trim() != etag => Wanted::Whole,
        _ => wanted(text(header::RANGE), size),
    }
}

/// Whether `If-None-Match`'s list names `etag` (or is `*`); weak tags compare by their
/// value, as the RFC's weak comparison does for this header.
fn matches_etag(tags: &str, etag: &str) -> bool {
    tags.split(',')
        .map(|t| t.trim())
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

/// The part of a value of `size` bytes that `header` (the `Range` header's text) asks for.
fn wanted(header: Option<&str>, size: u64) -> Wanted {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Wanted::Whole;
    };
    if spec.contains(',') {
        return Wanted::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Wanted::Whole;
    };
    let number = |t: &str| -> Option<u64> {
        let t = t.trim();
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse().ok())
            .flatten()
    };
    match (first.trim().is_empty(), last.trim().is_empty()) {
        // The last n bytes.
        (true, false) => match number(last) {
            Some(0) => Wanted::Unsatisfiable,
            Some(_) if size == 0 => Wanted::Unsatisfiable,
            Some(n) => Wanted::Part {
                start: size.saturating_sub(n),
                end: size,
            },
            None => Wanted::Whole,
        },
        (false, true) => match number(first) {
            Some(start) if start >= size => Wanted::Unsatisfiable,
            Some(start) => Wanted::Part { start, end: size },
            None => Wanted::Whole,
        },
        (false, false) => match (number(first), number(last)) {
            (Some(start), Some(last)) if start <= last => {
                if start >= size {
                    Wanted::Unsatisfiable
                } else {
                    Wanted::Part {
                        start,
                        end: last.saturating_add(1).min(size),
                    }
                }
            }
            _ => Wanted::Whole,
        },
        (true, true) => Wanted::Whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn if_none_match_names_the_version_or_any() {
        assert!(matches_etag("\"3\"", "\"3\""));
        assert!(matches_etag("\"1\", W/\"3\"", "\"3\""));
        assert!(matches_etag("*", "\"3\""));
        assert!(!matches_etag("\"30\"", "\"3\""));
    }

    #[test]
    fn a_tag_the_client_holds_answers_not_modified_and_another_the_whole_value() {
        let headers = |pairs: &[(header::HeaderName, &'static str)]| {
            let mut h = HeaderMap::new();
            for (name, value) in pairs {
                h.insert(name.clone(), HeaderValue::from_static(value));
            }
            h
        };
        let tag = "\"3\"";
        let range = (header::RANGE, "bytes=2-4");
        assert_eq!(
            asked(&headers(std::slice::from_ref(&range)), tag, 10),
            Wanted::Part { start: 2, end: 5 }
        );
        assert_eq!(
            asked(
                &headers(&[(header::IF_NONE_MATCH, "\"3\""), range.clone()]),
                tag,
                10
            ),
            Wanted::NotModified
        );
        assert_eq!(
            asked(
                &headers(&[(header::IF_RANGE, "\"2\""), range.clone()]),
                tag,
                10
            ),
            Wanted::Whole
        );
        assert_eq!(
            asked(&headers(&[(header::IF_RANGE, "\"3\""), range]), tag, 10),
            Wanted::Part { start: 2, end: 5 }
        );
    }

    #[test]
    fn one_byte_range_is_read_as_the_rfc_says() {
        let part = |start, end| Wanted::Part { start, end };
        assert_eq!(wanted(None, 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=0-3"), 10), part(0, 4));
        assert_eq!(wanted(Some("bytes=4-"), 10), part(4, 10));
        assert_eq!(wanted(Some("bytes=-3"), 10), part(7, 10));
        assert_eq!(wanted(Some("bytes=-30"), 10), part(0, 10));
        // The end clamps to the value's; a start past it holds nothing.
        assert_eq!(wanted(Some("bytes=8-100"), 10), part(8, 10));
        assert_eq!(wanted(Some("bytes=10-"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=10-20"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=-0"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=0-"), 0), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=-5"), 0), Wanted::Unsatisfiable);
    }

    #[test]
    fn what_is_not_one_byte_range_reads_the_whole_value() {
        for header in [
            "bytes=0-1,4-5",
            "items=0-1",
            "bytes=5-2",
            "bytes=a-b",
            "bytes=-",
            "bytes=1",
            "0-1",
        ] {
            assert_eq!(wanted(Some(header), 10), Wanted::Whole, "{header}");
        }
    }
}

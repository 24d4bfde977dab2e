//! Times as users write them: integer microseconds since the Unix epoch, RFC 3339, or an
//! exact commit timestamp `WALL_US-LOGICAL` as Firn prints it.

use crate::error::FirnError;
use crate::hlc::CommitTs;

/// Parses microseconds since the Unix epoch, given as an integer or as RFC 3339.
pub fn parse_micros(text: &str) -> Result<u64, FirnError> {
    let text = text.trim();
    if let Ok(us) = text.parse::<u64>() {
        return Ok(us);
    }
    match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(t) => u64::try_from(t.timestamp_micros())
            .map_err(|_| FirnError::BadTime(format!("'{text}' is before the Unix epoch"))),
        Err(_) => Err(FirnError::BadTime(format!(
            "'{text}' is not a time; use integer microseconds since the Unix epoch or RFC 3339 \
             (e.g. 2026-11-22T10:00:00Z)"
        ))),
    }
}

/// Parses a read bound: "newest with commit_ts ≤ T". Microseconds (or RFC 3339) include every
/// write stamped within that microsecond; `WALL_US-LOGICAL` is exact.
pub fn parse_read_time(text: &str) -> Result<CommitTs, FirnError> {
    if text.contains('-') && !text.contains('T') && !text.starts_with('-') {
        // A single `-` between two numbers is a stamp; anything else (a date without its
        // time, `2026-13-45`) is named as the time it tried to be, with every form accepted.
        return text.parse::<CommitTs>().map_err(|why| match text.matches('-').count() {
            1 if text.split('-').all(|p| p.chars().all(|c| c.is_ascii_digit())) => {
                FirnError::BadTime(why)
            }
            _ => FirnError::BadTime(format!(
                "'{text}' is not a time; use integer microseconds since the Unix epoch, RFC 3339 \
                 (e.g. 2026-11-22T10:00:00Z) or a commit stamp WALL_US-LOGICAL (e.g. 1764000000000000-0)"
            )),
        });
    }
    parse_micros(text).map(CommitTs::end_of_micros)
}

/// Formats microseconds since the epoch as RFC 3339 with microsecond precision.
pub fn micros_to_rfc3339(us: u64) -> String {
    let secs = (us / 1_000_000) as i64;
    let nanos = ((us % 1_000_000) * 1_000) as u32;
    chrono::DateTime::from_timestamp(secs, nanos)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_else(|| us.to_string())
}

/// A duration as a number of seconds or with units (`90s`, `15m`, `2h`, `7d`).
pub fn parse_duration_us(text: &str) -> Result<u64, FirnError> {
    if let Ok(secs) = text.parse::<u64>() {
        return secs
            .checked_mul(1_000_000)
            .ok_or_else(|| FirnError::BadArgument(format!("duration '{text}' is too long")));
    }
    humantime::parse_duration(text)
        .map(|d| d.as_micros().min(u64::MAX as u128) as u64)
        .map_err(|_| {
            FirnError::BadArgument(format!(
                "'{text}' is not a duration; use seconds or units like 90s, 15m, 2h, 7d"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_rfc3339_and_exact_forms_parse() {
        assert_eq!(parse_micros("1500").unwrap(), 1500);
        assert_eq!(parse_micros("1970-01-01T00:00:01Z").unwrap(), 1_000_000);
        assert_eq!(parse_read_time("7").unwrap(), CommitTs::end_of_micros(7));
        assert_eq!(parse_read_time("7-3").unwrap(), CommitTs::new(7, 3));
        assert_eq!(
            parse_read_time("1970-01-01T00:00:00.000002Z").unwrap(),
            CommitTs::end_of_micros(2)
        );
    }

    #[test]
    fn bad_times_are_refused_with_the_accepted_forms_named() {
        for bad in ["yesterday", "-5", "1969-12-31T23:59:59Z", "12-x", ""] {
            let err = parse_read_time(bad).unwrap_err();
            assert!(matches!(err, FirnError::BadTime(_)), "{bad}: {err}");
        }
        // A date that is no date is named as a time, with the forms a time may take; a stamp
        // whose counter is too large is named as a stamp.
        for bad in ["2026-13-45", "2026-11-22"] {
            let err = parse_read_time(bad).unwrap_err().to_string();
            assert!(
                err.contains(&format!("'{bad}' is not a time")) && err.contains("RFC 3339"),
                "{bad}: {err}"
            );
        }
        let err = parse_read_time("7-99999999999").unwrap_err().to_string();
        assert!(err.contains("logical counter"), "{err}");
    }

    #[test]
    fn durations_are_seconds_or_units() {
        assert_eq!(parse_duration_us("90").unwrap(), 90_000_000);
        assert_eq!(parse_duration_us("15m").unwrap(), 900_000_000);
        assert_eq!(parse_duration_us("300ms").unwrap(), 300_000);
        assert!(parse_duration_us("soon").is_err());
    }

    #[test]
    fn rfc3339_round_trips() {
        assert_eq!(micros_to_rfc3339(1_000_001), "1970-01-01T00:00:01.000001Z");
    }
}

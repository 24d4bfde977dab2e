//! A file view path: a key or a directory (a prefix ending in `/`), and the time it is read
//! at when it names one (`cams/cam3@2026-11-29T10:02:07.5Z`, `cams/@T`, `@T` for the root).

use firn_model::time::parse_read_time;
use firn_model::{CommitTs, FirnError};

/// What a `/v1/fs/…` path names.
#[derive(Debug, PartialEq, Eq)]
pub struct FsPath {
    /// The key, or the directory's prefix: empty (the root) or ending in `/`.
    pub name: String,
    /// The time of the cut it is read at; none: now.
    pub at: Option<CommitTs>,
}

impl FsPath {
    /// Reads a path as it came in the URL (decoded). The text after its last `@` is the
    /// time: a path with an `@` whose tail is not a time is refused (`BADTIME`), not read as
    /// a key, so a mistyped time never answers the newest value. A key that has an `@` of
    /// its own is read with a time after it (`a@b@<T>`).
    pub fn parse(path: &str) -> Result<Self, FirnError> {
        let path = path.strip_prefix('/').unwrap_or(path);
        match path.rsplit_once('@') {
            None => Ok(FsPath {
                name: path.to_string(),
                at: None,
            }),
            Some((name, time)) => {
                let at = parse_read_time(time).map_err(|e| {
                    FirnError::BadTime(format!(
                        "the path's time after '@': {e}; a key with an '@' of its own is read with a time after it (KEY@T)"
                    ))
                })?;
                Ok(FsPath {
                    name: name.to_string(),
                    at: Some(at),
                })
            }
        }
    }

    /// Whether it can only be a directory: the root or a name ending in `/`.
    pub fn is_directory(&self) -> bool {
        self.name.is_empty() || self.name.ends_with('/')
    }

    /// The directory it is when it is not a file: the name with its `/`.
    pub fn as_directory(&self) -> String {
        if self.is_directory() {
            self.name.clone()
        } else {
            format!("{}/", self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_a_key_or_a_directory_and_maybe_a_time() {
        let p = FsPath::parse("cams/cam3").unwrap();
        assert_eq!(
            (p.name.as_str(), p.at, p.is_directory()),
            ("cams/cam3", None, false)
        );
        assert_eq!(p.as_directory(), "cams/cam3/");
        let p = FsPath::parse("cams/cam3@2026-11-29T10:02:07.5Z").unwrap();
        assert_eq!(p.name, "cams/cam3");
        let t = p.at.unwrap();
        assert_eq!(t, parse_read_time("2026-11-29T10:02:07.5Z").unwrap());
        let p = FsPath::parse("cams/@1764000000000000-3").unwrap();
        assert_eq!(
            (p.name.as_str(), p.at),
            ("cams/", Some(CommitTs::new(1_764_000_000_000_000, 3)))
        );
        assert!(p.is_directory());
        let p = FsPath::parse("@1764000000000000").unwrap();
        assert!(p.name.is_empty() && p.is_directory() && p.at.is_some());
        assert!(FsPath::parse("").unwrap().is_directory());
        // A key with an '@' of its own: the time after it.
        let p = FsPath::parse("mail/a@b@1764000000000000").unwrap();
        assert_eq!(p.name, "mail/a@b");
    }

    #[test]
    fn an_at_without_a_time_is_refused_not_read_as_a_key() {
        for bad in [
            "cams/cam3@",
            "cams/cam3@yesterday",
            "a@2026-13-45",
            "mail/a@b",
        ] {
            let e = FsPath::parse(bad).unwrap_err();
            assert!(matches!(e, FirnError::BadTime(_)), "{bad}: {e:?}");
            assert!(e.to_string().contains("after '@'"), "{e}");
        }
    }
}

//! A directory of the file view: the children of a prefix at one cut — the files directly
//! under it and the directories (next `/`) below it — read by snapshots at one time, page
//! after page, skipping each subdirectory's keys rather than reading them.

use axum::body::Bytes;
use firn_model::limits::KEY_BYTES_MAX;
use firn_model::time::micros_to_rfc3339;
use firn_model::{CommitTs, KvRead, Response, SnapshotOf, VersionInfo};
use serde_json::{Value as Json, json};

use super::super::json::set_name;
use super::super::{ApiError, Session, unexpected};
use crate::router::Router;

/// Keys one snapshot page examines.
const SCAN_PAGE_KEYS: usize = 256;
/// Most snapshot pages one listing reads; past it the listing ends with a cursor to go on
/// from, so one request's work is bounded however the keys below it are laid out.
const SCAN_PAGES_MAX: usize = 64;

/// One child of a directory.
pub(super) enum Child {
    File {
        name: Bytes,
        info: VersionInfo,
    },
    /// A name ending in `/`.
    Directory {
        name: Bytes,
    },
}

impl Child {
    fn name(&self) -> &Bytes {
        match self {
            Child::File { name, .. } | Child::Directory { name } => name,
        }
    }
}

/// The children of `dir` at one cut, from after `after` (a child's name, as a page's
/// `next` gave it), at most `limit`.
pub(super) struct Listing {
    pub dir: String,
    pub at: CommitTs,
    pub children: Vec<Child>,
    /// The last child's name, when more may follow.
    pub next: Option<Bytes>,
}

/// The scan cursor just past every key under `subdir` (a name ending in `/`): a scan reads
/// the keys after its cursor, and no key is longer than [`KEY_BYTES_MAX`], so every key
/// that starts with `subdir` sorts before `subdir` followed by `0xFF` to one byte past it.
fn past_subtree(subdir: &[u8]) -> Bytes {
    let mut c = subdir.to_vec();
    c.resize(KEY_BYTES_MAX + 1, 0xFF);
    Bytes::from(c)
}

/// Where the scan goes on after the child `name` of `dir`.
fn cursor_after(dir: &str, name: &[u8]) -> Bytes {
    let mut key = dir.as_bytes().to_vec();
    key.extend_from_slice(name);
    if name.ends_with(b"/") {
        past_subtree(&key)
    } else {
        Bytes::from(key)
    }
}

/// Lists `dir` (empty or ending in `/`) at the cut `at`: every page a snapshot at it.
pub(super) async fn list(
    router: &Router,
    session: &Session,
    dir: &str,
    at: CommitTs,
    after: Option<Bytes>,
    limit: usize,
) -> Result<Listing, ApiError> {
    let mut cursor = after.map(|name| cursor_after(dir, &name));
    let mut children: Vec<Child> = Vec::new();
    let mut more = true;
    for _ in 0..SCAN_PAGES_MAX {
        if children.len() >= limit || !more {
            break;
        }
        let of = SnapshotOf::Prefix {
            prefix: Bytes::from(dir.to_string()),
            cursor: cursor.clone(),
            limit: SCAN_PAGE_KEYS,
        };
        let (keys, next_cursor) = match session
            .execute(router, KvRead::Snapshot { of, at: Some(at) }.into())
            .await?
            .response
        {
            Response::Snapshot { read, .. } => match *read {
                Response::Scan { keys, next_cursor } => (keys, next_cursor),
                other => return Err(unexpected(other)),
            },
            other => return Err(unexpected(other)),
        };
        more = next_cursor.is_some();
        cursor = next_cursor;
        for (key, info) in keys {
            let rest = &key.as_bytes()[dir.len()..];
            let child = match rest.iter().position(|b| *b == b'/') {
                Some(i) => Child::Directory {
                    name: Bytes::copy_from_slice(&rest[..=i]),
                },
                None => Child::File {
                    name: Bytes::copy_from_slice(rest),
                    info,
                },
            };
            // The rest of a subdirectory's keys on this page are its, and skipped.
            if children
                .last()
                .is_some_and(|last| last.name() == child.name())
            {
                continue;
            }
            let skip_past =
                matches!(child, Child::Directory { .. }).then(|| cursor_after(dir, child.name()));
            children.push(child);
            if children.len() >= limit {
                more = true;
                cursor = Some(cursor_after(dir, children[children.len() - 1].name()));
                break;
            }
            if let Some(past) = skip_past {
                // Past the subdirectory's last key on this page: the next page starts after
                // its whole subtree.
                if cursor.as_ref().is_none_or(|c| *c < past) && more {
                    cursor = Some(past);
                }
            }
        }
    }
    let next = more
        .then(|| children.last().map(|c| c.name().clone()))
        .flatten();
    Ok(Listing {
        dir: dir.to_string(),
        at,
        children,
        next,
    })
}

impl Listing {
    /// `{path, at, at_time, entries: [{name, type, …}], next_cursor}`.
    pub fn json(&self) -> Json {
        let entries: Vec<Json> = self
            .children
            .iter()
            .map(|child| {
                let mut j = match child {
                    Child::Directory { .. } => json!({ "type": "directory" }),
                    Child::File { info, .. } => json!({
                        "type": "file",
                        "size": info.size(),
                        "version": info.version,
                        "commit_ts": info.commit_ts.to_string(),
                        "commit_time": micros_to_rfc3339(info.commit_ts.wall_us),
                        "event_time": info.event_time_us,
                    }),
                };
                set_name(&mut j, "name", child.name());
                j
            })
            .collect();
        let mut j = json!({
            "path": self.dir,
            "at": self.at.to_string(),
            "at_time": micros_to_rfc3339(self.at.wall_us),
            "entries": entries,
            "next_cursor": null,
        });
        if let Some(next) = &self.next {
            set_name(&mut j, "next_cursor", next);
        }
        j
    }

    /// The same as a page for a browser: every link at the listing's cut.
    pub fn html(&self) -> String {
        let at = self.at.to_string();
        let mut rows = String::new();
        if !self.dir.is_empty() {
            let parent = match self.dir[..self.dir.len() - 1].rfind('/') {
                Some(i) => &self.dir[..=i],
                None => "",
            };
            rows.push_str(&format!(
                "<tr><td><a href=\"{}\">../</a></td><td></td><td></td><td></td></tr>\n",
                href(parent.as_bytes(), &at)
            ));
        }
        for child in &self.children {
            let Ok(name) = std::str::from_utf8(child.name()) else {
                // Not text: JSON names it (name_base64); a page cannot link it.
                continue;
            };
            let full = format!("{}{name}", self.dir);
            let (size, version, modified) = match child {
                Child::Directory { .. } => (String::new(), String::new(), String::new()),
                Child::File { info, .. } => (
                    info.size().to_string(),
                    info.version.to_string(),
                    micros_to_rfc3339(info.commit_ts.wall_us),
                ),
            };
            rows.push_str(&format!(
                "<tr><td><a href=\"{}\">{}</a></td><td>{size}</td><td>{version}</td><td>{modified}</td></tr>\n",
                href(full.as_bytes(), &at),
                escape(name)
            ));
        }
        let next = match &self.next {
            Some(n) => format!(
                "<p><a href=\"{}?cursor={}\">next page</a></p>",
                href(self.dir.as_bytes(), &at),
                percent_encoding::percent_encode(n, NAME)
            ),
            None => String::new(),
        };
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>/{dir} at {time}</title></head>\n<body>\n<h1>/{dir}</h1>\n<p>at {time} (<code>{at}</code>)</p>\n<table>\n<tr><th>name</th><th>size</th><th>version</th><th>modified</th></tr>\n{rows}</table>\n{next}\n</body></html>\n",
            dir = escape(&self.dir),
            time = micros_to_rfc3339(self.at.wall_us),
        )
    }
}

/// What a name in a link keeps as it is: letters, digits, `/` and `-_.~`.
const NAME: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The file view's link to `path` at the cut `at`.
fn href(path: &[u8], at: &str) -> String {
    format!(
        "/v1/fs/{}@{at}",
        percent_encoding::percent_encode(path, NAME)
    )
}

/// Text as HTML shows it.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_past_a_subdirectory_sorts_after_every_key_in_it() {
        let past = past_subtree(b"cams/");
        let longest = {
            let mut k = b"cams/".to_vec();
            k.resize(KEY_BYTES_MAX, 0xFF);
            k
        };
        for key in [&b"cams/a"[..], b"cams/\xff\xff", &longest] {
            assert!(key < &past[..], "{key:?}");
        }
        // The next sibling is after it.
        assert!(b"cams0"[..] > past[..]);
        assert!(b"camt"[..] > past[..]);
        assert_eq!(cursor_after("d/", b"f"), Bytes::from_static(b"d/f"));
    }

    #[test]
    fn links_and_names_are_escaped() {
        assert_eq!(href(b"a b/c@d", "1-0"), "/v1/fs/a%20b/c%40d@1-0");
        assert_eq!(escape("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }
}

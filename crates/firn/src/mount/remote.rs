//! The node's file view (`/v1/fs/…`, docs/api.md "The file view") as the mount reads it:
//! what a path is, a directory's children at one cut, and a part of a file.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use percent_encoding::utf8_percent_encode;

use crate::http::{HttpTarget, PATH};

/// Most children a directory shows; past it the listing is cut short (a warning is logged).
pub const LISTING_CHILDREN_MAX: usize = 100_000;
/// Children one page of a listing asks for (the endpoint's most).
const PAGE_CHILDREN: usize = 10_000;

/// What a path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stat {
    File(FileInfo),
    Directory,
}

/// A file's version as the node answered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInfo {
    pub size: u64,
    /// Its commit stamp (`WALL_US-LOGICAL`): reading the path at it reads this version.
    pub commit_ts: String,
}

impl FileInfo {
    /// Its commit time.
    pub fn mtime(&self) -> SystemTime {
        let wall_us = self
            .commit_ts
            .split('-')
            .next()
            .and_then(|w| w.parse::<u64>().ok())
            .unwrap_or(0);
        UNIX_EPOCH + Duration::from_micros(wall_us)
    }
}

/// Why a call gave no answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    NotFound,
    /// The user may not read it (401, 403).
    Denied(String),
    /// Anything else: the node unreachable, an error it answered.
    Other(String),
}

/// A child of a directory: a file with its version, or a directory (its name without `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    pub name: String,
    pub file: Option<FileInfo>,
}

pub struct Remote {
    target: HttpTarget,
}

impl Remote {
    pub fn new(target: HttpTarget) -> Self {
        Remote { target }
    }

    fn url(&self, path: &str, at: Option<&str>) -> String {
        let at = at.map(|t| format!("@{t}")).unwrap_or_default();
        format!(
            "{}/v1/fs/{}{at}",
            self.target.base(),
            utf8_percent_encode(path, PATH)
        )
    }

    /// What `path` names at `at` (now when none).
    pub fn stat(&self, path: &str, at: Option<&str>) -> Result<Stat, Failure> {
        // A directory's answer lists a page of its children: one is enough to know it.
        let answer = self
            .target
            .request("HEAD", &self.url(path, at))
            .query("limit", "1")
            .call()
            .map_err(failure)?;
        if answer.content_type() == "application/octet-stream" {
            let size = answer
                .header("content-length")
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            let commit_ts = answer.header("firn-commit-ts").unwrap_or("0-0").to_string();
            Ok(Stat::File(FileInfo { size, commit_ts }))
        } else {
            Ok(Stat::Directory)
        }
    }

    /// The children of `dir` (empty or ending in `/`) at `at` — now when none — every page
    /// at the first page's cut; and that cut.
    pub fn list(&self, dir: &str, at: Option<&str>) -> Result<(String, Vec<Child>), Failure> {
        let mut cut = at.map(str::to_string);
        let mut children = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut request = self
                .target
                .request("GET", &self.url(dir, cut.as_deref()))
                .set("Accept", "application/json")
                .query("limit", &PAGE_CHILDREN.to_string());
            if let Some(c) = &cursor {
                request = request.query("cursor", c);
            }
            let page: serde_json::Value = request
                .call()
                .map_err(failure)?
                .into_json()
                .map_err(|e| Failure::Other(format!("a listing that is not JSON: {e}")))?;
            cut = page["at"].as_str().map(str::to_string).or(cut);
            for entry in page["entries"].as_array().into_iter().flatten() {
                // A name that is not text has no file name here.
                let Some(name) = entry["name"].as_str() else {
                    continue;
                };
                let file = (entry["type"] == "file").then(|| FileInfo {
                    size: entry["size"].as_u64().unwrap_or(0),
                    commit_ts: entry["commit_ts"].as_str().unwrap_or("0-0").to_string(),
                });
                let name = name.trim_end_matches('/').to_string();
                children.push(Child { name, file });
            }
            if children.len() >= LISTING_CHILDREN_MAX {
                tracing::warn!(
                    dir,
                    "showing the first {LISTING_CHILDREN_MAX} children of a larger directory"
                );
                children.truncate(LISTING_CHILDREN_MAX);
                break;
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        let cut = cut.ok_or_else(|| Failure::Other("a listing without its cut".into()))?;
        Ok((cut, children))
    }

    /// Up to `size` bytes of `path` at `at` from `offset`; fewer at its end.
    pub fn read(&self, path: &str, at: &str, offset: u64, size: u32) -> Result<Vec<u8>, Failure> {
        if size == 0 {
            return Ok(Vec::new());
        }
        let last = offset + u64::from(size) - 1;
        let answer = self
            .target
            .request("GET", &self.url(path, Some(at)))
            .set("Range", &format!("bytes={offset}-{last}"))
            .call();
        let answer = match answer {
            Ok(a) => a,
            // Past the end: nothing more to read.
            Err(ureq::Error::Status(416, _)) => return Ok(Vec::new()),
            Err(e) => return Err(failure(e)),
        };
        let whole = answer.status() == 200;
        let mut data = Vec::with_capacity(size as usize);
        std::io::Read::read_to_end(&mut answer.into_reader(), &mut data)
            .map_err(|e| Failure::Other(format!("reading {path}: {e}")))?;
        if whole {
            // The node answered the whole value (no range on an empty one).
            let from = (offset as usize).min(data.len());
            let to = (last as usize + 1).min(data.len());
            data = data[from..to].to_vec();
        }
        Ok(data)
    }
}

fn failure(e: ureq::Error) -> Failure {
    match e {
        ureq::Error::Status(404, _) => Failure::NotFound,
        e @ ureq::Error::Status(401 | 403, _) => Failure::Denied(crate::http::failed(e)),
        other => Failure::Other(crate::http::failed(other)),
    }
}

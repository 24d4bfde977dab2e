//! The mount's inodes: each path it has shown, at its time (none: the live tree), under one
//! number for as long as the mount runs. A path's number never changes, so a file seen
//! twice is one file to `find` and `cp -a`.

use std::collections::HashMap;

use super::remote::FileInfo;

/// What an inode is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Directory,
    File(FileInfo),
}

#[derive(Clone, Debug)]
pub struct Entry {
    /// The key, or the directory's prefix (empty, or ending in `/`).
    pub path: String,
    /// The cut it is read at (a commit stamp); none: now.
    pub at: Option<String>,
    pub kind: Kind,
    /// When its attributes were last asked of the node.
    pub checked: std::time::Instant,
}

pub struct Tree {
    by_ino: HashMap<u64, Entry>,
    by_path: HashMap<(Option<String>, String), u64>,
    next: u64,
}

/// The root's inode number, as FUSE names it.
pub const ROOT: u64 = 1;

impl Tree {
    /// A tree whose root is the directory `prefix` at `at`.
    pub fn new(prefix: String, at: Option<String>) -> Tree {
        let mut tree = Tree {
            by_ino: HashMap::new(),
            by_path: HashMap::new(),
            next: ROOT,
        };
        tree.insert(prefix, at, Kind::Directory);
        tree
    }

    pub fn get(&self, ino: u64) -> Option<&Entry> {
        self.by_ino.get(&ino)
    }

    /// The inode of `path` at `at`, made or brought up to date with `kind`.
    pub fn insert(&mut self, path: String, at: Option<String>, kind: Kind) -> u64 {
        let checked = std::time::Instant::now();
        let key = (at.clone(), path.clone());
        if let Some(&ino) = self.by_path.get(&key) {
            if let Some(e) = self.by_ino.get_mut(&ino) {
                e.kind = kind;
                e.checked = checked;
            }
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_path.insert(key, ino);
        self.by_ino.insert(
            ino,
            Entry {
                path,
                at,
                kind,
                checked,
            },
        );
        ino
    }

    /// Inodes held (one a path shown, for as long as the mount runs).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_ino.len()
    }
}

/// The path of `parent`'s child `name`: a directory's ends in `/`.
pub fn child_path(parent: &str, name: &str, directory: bool) -> String {
    if directory {
        format!("{parent}{name}/")
    } else {
        format!("{parent}{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_keeps_its_inode_and_each_time_has_its_own() {
        let mut tree = Tree::new(String::new(), None);
        assert_eq!(tree.get(ROOT).unwrap().path, "");
        let info = FileInfo {
            size: 3,
            commit_ts: "5-0".into(),
        };
        let a = tree.insert("cams/a".into(), None, Kind::File(info.clone()));
        let newer = FileInfo {
            size: 4,
            commit_ts: "6-0".into(),
        };
        assert_eq!(
            tree.insert("cams/a".into(), None, Kind::File(newer.clone())),
            a
        );
        assert_eq!(tree.get(a).unwrap().kind, Kind::File(newer));
        let then = tree.insert("cams/a".into(), Some("5-0".into()), Kind::File(info));
        assert_ne!(then, a);
        assert_eq!(tree.len(), 3);
        assert_eq!(child_path("cams/", "deep", true), "cams/deep/");
        assert_eq!(child_path("", "readme", false), "readme");
    }
}

//! Who may open a region besides the node's own user. A region holds the newest value of
//! every key of every `LOCAL` keyspace, whatever prefixes a user file grants: reading the
//! file is reading all of them. So the file is the node's user's alone (mode 0600) unless
//! a group is named, whose members may read it (0640); nobody else may. This module sets
//! and checks the file's mode and group; it never decides who the readers should be (the
//! node's settings do).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::error::RegionError;

/// Who may read a region file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RegionReaders {
    /// The node's user only (mode 0600).
    #[default]
    Owner,
    /// The node's user, and the members of this group (by id) read-only (mode 0640).
    Group(u32),
}

impl RegionReaders {
    /// The file mode that grants exactly these readers.
    pub fn mode(self) -> u32 {
        match self {
            RegionReaders::Owner => 0o600,
            RegionReaders::Group(_) => 0o640,
        }
    }

    /// Gives `file` (at `path`) its group, then its mode: both by descriptor, so that
    /// the file is never open to more readers than these, whatever the umask.
    pub(crate) fn apply(self, file: &File, path: &Path) -> Result<(), RegionError> {
        if let RegionReaders::Group(gid) = self {
            // SAFETY: fchown on a descriptor `file` owns; uid -1 leaves the owner as is.
            if unsafe { libc::fchown(file.as_raw_fd(), u32::MAX, gid) } != 0 {
                return Err(RegionError::Group {
                    path: path.to_path_buf(),
                    gid,
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        file.set_permissions(std::fs::Permissions::from_mode(self.mode()))
            .map_err(|source| RegionError::Io {
                path: path.to_path_buf(),
                source,
            })
    }

    /// Whether the file at `path` grants exactly these readers (false if it cannot be
    /// read): a file that grants more, or other ones, is replaced rather than reused, so
    /// that whoever mapped it before loses it.
    pub(crate) fn granted_by(self, path: &Path) -> bool {
        let Ok(meta) = std::fs::metadata(path) else {
            return false;
        };
        let group_right = match self {
            RegionReaders::Owner => true,
            RegionReaders::Group(gid) => meta.gid() == gid,
        };
        meta.permissions().mode() & 0o777 == self.mode() && group_right
    }
}

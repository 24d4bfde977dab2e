//! `--node-id`: a number, or taken from the host name.

use std::str::FromStr;

/// `--node-id`: given, or taken from the host name (see [`node_id_from_host_name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeIdSetting {
    Id(u64),
    HostOrdinal,
}

pub(super) const HOST_ORDINAL: &str = "host-ordinal";

impl FromStr for NodeIdSetting {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == HOST_ORDINAL {
            return Ok(NodeIdSetting::HostOrdinal);
        }
        match text.parse::<u64>() {
            Ok(0) => Err("node ids start at 1".into()),
            Ok(id) => Ok(NodeIdSetting::Id(id)),
            Err(_) => Err(format!(
                "'{text}' is neither a node id (1, 2, …) nor {HOST_ORDINAL}"
            )),
        }
    }
}

impl std::fmt::Display for NodeIdSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeIdSetting::Id(id) => write!(f, "{id}"),
            NodeIdSetting::HostOrdinal => f.write_str(HOST_ORDINAL),
        }
    }
}

impl NodeIdSetting {
    /// The node id, and the host name it was taken from if it was.
    pub(super) fn resolve(self) -> Result<(u64, Option<String>), String> {
        match self {
            NodeIdSetting::Id(id) => Ok((id, None)),
            NodeIdSetting::HostOrdinal => {
                let host = host_name()?;
                Ok((node_id_from_host_name(&host)?, Some(host)))
            }
        }
    }
}

/// One more than the number that ends the host name's first label: a StatefulSet's pod
/// `firn-0` (ordinal 0) is node 1, because node ids start at 1.
pub fn node_id_from_host_name(host: &str) -> Result<u64, String> {
    let label = host.split('.').next().unwrap_or_default();
    let digits = label.len() - label.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let ordinal = &label[label.len() - digits..];
    ordinal
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| {
            format!(
                "--node-id {HOST_ORDINAL}: the host name '{host}' does not end in a number \
                 (a StatefulSet's pods are named like firn-0, firn-1, …)"
            )
        })
}

/// This machine's host name (in a container or pod, its own).
fn host_name() -> Result<String, String> {
    // 255 bytes is the longest host name POSIX allows (HOST_NAME_MAX on Linux is 64).
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many
    // bytes, and the name is read only up to the first NUL within the buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(format!(
            "--node-id {HOST_ORDINAL}: cannot read the host name: {}",
            std::io::Error::last_os_error()
        ));
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_is_a_number_from_one_or_host_ordinal() {
        assert_eq!("3".parse(), Ok(NodeIdSetting::Id(3)));
        assert_eq!("host-ordinal".parse(), Ok(NodeIdSetting::HostOrdinal));
        assert!(
            "0".parse::<NodeIdSetting>()
                .unwrap_err()
                .contains("start at 1")
        );
        assert!("firn-0".parse::<NodeIdSetting>().is_err());
        assert_eq!(NodeIdSetting::HostOrdinal.to_string(), "host-ordinal");
    }

    #[test]
    fn host_ordinal_is_one_more_than_the_host_names_trailing_number() {
        assert_eq!(node_id_from_host_name("firn-0"), Ok(1));
        assert_eq!(node_id_from_host_name("firn-2"), Ok(3));
        assert_eq!(
            node_id_from_host_name("firn-12.firn-peers.default.svc.cluster.local"),
            Ok(13)
        );
        for bad in ["firn", "", "firn-0x", "firn-99999999999999999999"] {
            let e = node_id_from_host_name(bad).unwrap_err();
            assert!(e.contains("does not end in a number"), "{bad}: {e}");
        }
    }
}

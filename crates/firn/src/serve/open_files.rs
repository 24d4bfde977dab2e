//! The process's open-file limit against the connections a node may hold, as Redis fits
//! `maxclients` to it: the soft limit is raised (up to the hard limit) to hold every client
//! connection allowed plus [`RESERVED_FILES`]; where the hard limit is too low, the limit on
//! connections is lowered to what fits, and the node says so. Without it a node at 1,024
//! open files (a common default) failed to accept past about a thousand clients, whatever
//! `--max-connections` said.

/// Descriptors kept for everything but client connections: the storage engine's table and
/// journal files, peer connections, HTTP clients, the local-read region.
pub(super) const RESERVED_FILES: u64 = 1_024;

/// The number of client connections this process can hold: `wanted` for each of
/// `listeners` connection listeners (RESP, and MQTT when on, each bounded by
/// `--max-connections`), after raising the soft open-file limit as far as needed and
/// allowed; fewer (at least 1) when the hard limit does not allow it.
pub(super) fn fit_connections(wanted: usize, listeners: u64) -> usize {
    let needed = wanted as u64 * listeners + RESERVED_FILES;
    let Some((soft, hard)) = limits() else {
        return wanted;
    };
    if soft >= needed {
        return wanted;
    }
    let raised = needed.min(hard);
    if set_soft(raised, hard) {
        tracing::info!(
            from = soft,
            to = raised,
            "raised the open-file limit (RLIMIT_NOFILE)"
        );
    }
    let now = limits().map_or(soft, |(soft, _)| soft);
    if now >= needed {
        return wanted;
    }
    let fits = (now.saturating_sub(RESERVED_FILES) / listeners).max(1) as usize;
    tracing::warn!(
        "--max-connections {wanted} needs {needed} open files, and this process may open \
         {now} (its hard limit is {hard}): taking at most {fits} connections a listener; \
         raise the limit (ulimit -n, LimitNOFILE= in a systemd unit) for more"
    );
    fits
}

/// The (soft, hard) open-file limits; `None` if they cannot be read.
fn limits() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (rc == 0).then_some((limit.rlim_cur, limit.rlim_max))
}

fn set_soft(soft: u64, hard: u64) -> bool {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: `limit` is a valid rlimit; setrlimit only reads it.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_that_already_fits_is_left_alone() {
        let (soft, _) = limits().expect("the limits read");
        let wanted = (soft.saturating_sub(RESERVED_FILES) / 2).max(1) as usize;
        assert_eq!(fit_connections(wanted, 1), wanted);
        assert_eq!(limits().unwrap().0, soft);
    }
}

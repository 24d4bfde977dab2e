//! What a write openraft did not complete means for Firn's client.

use firn_model::FirnError;
use openraft::errors::ClientWriteError;

use super::leader_named;
use crate::types::{FirnRaft, ShardId};

/// What a write openraft did not complete means for the client. Refused before its entry
/// was appended (not the leader, a precondition): nothing happened, retry. Its entry
/// appended here and then discarded when this replica took another leader's log (truncated,
/// or under an installed snapshot): it may have been committed through that leader, so the
/// outcome is unknown — a retry could apply it twice.
pub(super) fn write_refused(shard_id: ShardId, e: ClientWriteError<FirnRaft>) -> FirnError {
    match e {
        ClientWriteError::ForwardToLeader(f) => FirnError::TryAgain(format!(
            "this replica is not the leader of shard {shard_id} ({})",
            leader_named(f.leader_id)
        )),
        ClientWriteError::LogEntryDiscarded(f) => FirnError::Indeterminate(format!(
            "shard {shard_id} changed leader ({}) before the write committed here; \
             it may or may not be applied",
            leader_named(f.leader_id)
        )),
        e @ (ClientWriteError::ChangeMembershipError(_)
        | ClientWriteError::PreconditionFailed(_)) => {
            FirnError::TryAgain(format!("write not applied, retry: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use openraft::errors::ForwardToLeader;

    use super::*;

    /// A client told TRYAGAIN retries, so only a write that never reached the log may get it;
    /// one whose entry was appended and then discarded is UNCERTAIN (it may have committed
    /// through the next leader, and a retry would apply it twice).
    #[test]
    fn a_write_whose_entry_was_discarded_is_uncertain_not_retryable() {
        let discarded = write_refused(
            3,
            ClientWriteError::LogEntryDiscarded(ForwardToLeader::empty()),
        );
        assert!(
            matches!(discarded, FirnError::Indeterminate(_)),
            "{discarded:?}"
        );
        let not_leader = write_refused(
            3,
            ClientWriteError::ForwardToLeader(ForwardToLeader::empty()),
        );
        assert!(
            matches!(not_leader, FirnError::TryAgain(_)),
            "{not_leader:?}"
        );
        // The leader is named in words a user reads, not as a Rust `Option`.
        assert!(
            not_leader.to_string().contains("(no leader known yet)"),
            "{not_leader}"
        );
        let elsewhere = write_refused(
            3,
            ClientWriteError::ForwardToLeader(ForwardToLeader::new(2, Default::default())),
        );
        assert!(
            elsewhere.to_string().contains("(leader: node 2)"),
            "{elsewhere}"
        );
    }
}

//! FIRN.LEASE GRANT ttl | KEEPALIVE id | REVOKE id | TTL id: leases as etcd has them. A key
//! written with `SET … LEASE id` (or `FIRN.PUT … LEASE id`) is deleted when its lease ends:
//! revoked, or not kept alive for its TTL (docs/architecture.md, "Leases").

use firn_model::{
    FirnError, KvRead, KvWrite, LeaseChange, LeaseWrite, ReadConsistency, Response, lease_key,
};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_LEASE: CommandSpec = CommandSpec {
    name: "firn.lease",
    arity: 3,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "GRANT ttl-seconds -> id; KEEPALIVE id -> ttl; REVOKE id (its keys are deleted); TTL id -> ms left.",
    parse: firn_lease,
};

fn firn_lease(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let change = match sub.as_str() {
        "GRANT" => {
            let ttl_s = args.u64("ttl")?;
            crate::exec::check_lease_ttl(ttl_s)?;
            // The kernel picks the id (`lease::with_lease_id`).
            let write = KvWrite::Lease(LeaseWrite::new(0, LeaseChange::Grant { ttl_s }));
            return Ok(Action::execute(
                write,
                Render::new(|response| match response {
                    Response::Lease(Some(lease)) => Reply::Int(lease.id as i64),
                    other => unexpected("FIRN.LEASE GRANT", other),
                }),
            ));
        }
        "KEEPALIVE" => LeaseChange::KeepAlive,
        "REVOKE" => LeaseChange::End,
        "TTL" => {
            let id = args.u64("lease id")?;
            let read = KvRead::Lease {
                key: lease_key(id),
                id,
                consistency: ReadConsistency::Linearizable,
            };
            return Ok(Action::execute(
                read,
                Render::new(|response| match response {
                    Response::Lease(Some(lease)) => {
                        let now_ms = firn_model::hlc::system_wall_us() / 1_000;
                        Reply::Int((lease.expires.wall_us / 1_000).saturating_sub(now_ms) as i64)
                    }
                    other => unexpected("FIRN.LEASE TTL", other),
                }),
            ));
        }
        other => {
            return Err(FirnError::BadArgument(format!(
                "unknown FIRN.LEASE subcommand '{other}'; use GRANT, KEEPALIVE, REVOKE or TTL"
            )));
        }
    };
    let write = KvWrite::Lease(LeaseWrite::new(args.u64("lease id")?, change));
    Ok(Action::execute(
        write,
        Render::new(|response| match response {
            Response::Lease(Some(lease)) => Reply::Int(lease.ttl_s as i64),
            Response::Done => Reply::Ok,
            other => unexpected("FIRN.LEASE", other),
        }),
    ))
}

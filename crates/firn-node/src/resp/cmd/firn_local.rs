//! FIRN.LOCAL: where this node's shared-memory region is, for a client on the same host
//! (`firn_client::LocalClient` opens it and reads `LOCAL on` keyspaces without a request).

use firn_model::{AdminRequest, FirnError, LocalRegionInfo, Response};

use super::exact_arity;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_LOCAL: CommandSpec = CommandSpec {
    name: "firn.local",
    arity: 1,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "Where this node's shared-memory region for local reads is, and its sizes.",
    parse: firn_local,
};

fn firn_local(args: Args) -> Result<Action, FirnError> {
    exact_arity(&args, 0)?;
    Ok(Action::execute(
        AdminRequest::LocalRegion,
        Render::new(show_region),
    ))
}

fn show_region(response: Response) -> Reply {
    let Response::LocalRegion(info) = response else {
        return unexpected("FIRN.LOCAL", response);
    };
    let LocalRegionInfo {
        path,
        node_id,
        cluster_id,
        incarnation,
        entries,
        key_bytes_max,
        value_bytes_max,
    } = info;
    let int = |n: u64| Reply::Int(n as i64);
    Reply::Map(vec![
        (Reply::text("path"), Reply::text(path)),
        (Reply::text("node_id"), int(node_id)),
        (Reply::text("cluster_id"), Reply::text(cluster_id)),
        (Reply::text("incarnation"), int(incarnation)),
        (Reply::text("entries"), int(entries)),
        (Reply::text("key_bytes_max"), int(key_bytes_max)),
        (Reply::text("value_bytes_max"), int(value_bytes_max)),
    ])
}

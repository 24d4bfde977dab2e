"""Local reads: a client on the same host as a node reads ``LOCAL on`` keyspaces from the
node's shared-memory region, with no request and no system call, and falls back to a
linearizable ``FIRN.GET`` when the region cannot answer (the key is not published there, its
shard is not here, the replica is behind the client's causality token, …). A port of
``firn_client::LocalClient``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from .._session import as_bytes, opt_int, parse_map, text
from ..errors import RegionError
from ..stamps import CommitTs
from .reader import Linearizable, LocalRead, LocalValue, NotLiveRegionError, RegionReader, Remote, Stale

if TYPE_CHECKING:  # pragma: no cover
    from ..client import Client

__all__ = ["LocalRegionInfo", "LocalGet", "LocalClient", "open_region"]


@dataclass(frozen=True)
class LocalRegionInfo:
    """Where a node's region is (``FIRN.LOCAL``)."""

    path: str
    node_id: int
    cluster_id: str
    incarnation: int
    entries: int
    key_bytes_max: int
    value_bytes_max: int


@dataclass(frozen=True)
class LocalGet:
    """A read's answer: the key's newest version and how fresh it is. ``value`` is ``None``
    for a deleted key; read from the node, an absent or deleted key has version 0, read from
    the region a deletion keeps its version. ``bound`` is :class:`Linearizable`,
    :class:`Stale` (from the region) or :class:`Remote` (read from the node, linearizably,
    with the reason the region could not answer)."""

    value: Optional[bytes]
    version: int
    commit_ts: CommitTs
    bound: Union[Linearizable, Stale, Remote]

    @property
    def local(self) -> bool:
        """Whether the region answered (no request was sent)."""
        return not isinstance(self.bound, Remote)


def open_region(info: LocalRegionInfo) -> RegionReader:
    """Opens the region a node announced: read-only, refused if this host cannot open it
    (the node is elsewhere), if it is of another layout version or cluster, or if it is not
    the node's live region (its incarnation differs from the announced one)."""
    if len(info.cluster_id) != 32 or any(c not in "0123456789abcdefABCDEF" for c in info.cluster_id):
        raise RegionError(f"cluster id {info.cluster_id!r} is not 32 hex digits")
    try:
        region = RegionReader.open(info.path, expect_cluster=info.cluster_id)
    except RegionError as e:
        raise type(e)(
            f"cannot open node {info.node_id}'s region at {info.path} (is the node on this host?): {e.message}",
            **_detail(e),
        ) from e
    found = region.header().incarnation
    if found != info.incarnation:
        region.close()
        raise NotLiveRegionError(
            f"the region at {info.path} is not node {info.node_id}'s live region "
            f"(incarnation {found} there, {info.incarnation} announced)"
        )
    return region


def _detail(e: RegionError) -> Dict[str, Any]:
    return {k: getattr(e, k) for k in ("found", "expected") if hasattr(e, k)}


class LocalClient:
    """A :class:`~firn.Client` with the shared-memory region of the node it talks to. Reads
    and the client share one causality token: a local read never answers older than what
    the client has seen (its writes included), and raises the token by what it shows."""

    def __init__(self, client: "Client", region: RegionReader, info: LocalRegionInfo) -> None:
        self.client = client
        self.region = region
        self.info = info

    @classmethod
    def open(cls, client: "Client") -> "LocalClient":
        """Asks the node where its region is (``FIRN.LOCAL``) and opens it."""
        info = local_region_info(client)
        return cls(client, open_region(info), info)

    @property
    def token(self) -> CommitTs:
        return self.client.token

    def get_local(self, key: Union[str, bytes]) -> LocalRead:
        """The region alone: a :class:`LocalValue`, or :class:`Remote` with why the node
        must be asked. Never sends anything."""
        token = self.client.token
        read = self.region.get(as_bytes(key, "key"), token if token > CommitTs.ZERO else None)
        if isinstance(read, LocalValue):
            self.client._session.observe(read.commit_ts)
        return read

    def get(self, key: Union[str, bytes]) -> LocalGet:
        """The key's newest version: from the region when it can answer, else from the node
        (a linearizable ``FIRN.GET`` that comes after the client's token)."""
        read = self.get_local(key)
        if isinstance(read, LocalValue):
            return LocalGet(read.value, read.version, read.commit_ts, read.bound)
        v = self.client.get(key)
        if v is None:
            return LocalGet(None, 0, CommitTs.ZERO, read)
        return LocalGet(v.value, v.version, v.commit_ts, read)

    def close(self) -> None:
        self.region.close()

    def __enter__(self) -> "LocalClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_region_info(client: "Client") -> LocalRegionInfo:
    m = parse_map(client._session.call("FIRN.LOCAL"))
    return LocalRegionInfo(
        path=text(m[b"path"]) or "",
        node_id=int(m[b"node_id"]),
        cluster_id=text(m[b"cluster_id"]) or "",
        incarnation=int(m[b"incarnation"]),
        entries=opt_int(m.get(b"entries")) or 0,
        key_bytes_max=opt_int(m.get(b"key_bytes_max")) or 0,
        value_bytes_max=opt_int(m.get(b"value_bytes_max")) or 0,
    )

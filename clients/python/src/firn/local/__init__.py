"""Reads of a node's shared-memory region from a process on the same host (a port of the
Rust crate ``firn-local``'s reader and ``firn_client::LocalClient``)."""

from .client import LocalClient, LocalGet, LocalRegionInfo, open_region
from .layout import LAYOUT_VERSION, RegionConfig
from .reader import (
    LayoutVersionError,
    Linearizable,
    LocalRead,
    LocalValue,
    NotARegionError,
    NotLiveRegionError,
    OtherClusterError,
    RegionHeader,
    RegionReader,
    RegionRetiredError,
    RegionSizeError,
    Remote,
    RemoteReason,
    Stale,
)

__all__ = [
    "LocalClient",
    "LocalGet",
    "LocalRegionInfo",
    "open_region",
    "LAYOUT_VERSION",
    "RegionConfig",
    "RegionReader",
    "RegionHeader",
    "LocalRead",
    "LocalValue",
    "Linearizable",
    "Stale",
    "Remote",
    "RemoteReason",
    "NotARegionError",
    "LayoutVersionError",
    "RegionSizeError",
    "RegionRetiredError",
    "OtherClusterError",
    "NotLiveRegionError",
]

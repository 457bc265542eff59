"""What every part of the region kind shares, importing nothing heavy (the registry loads it on every command)."""

from __future__ import annotations

from typing import Any

KIND = "cxl_region"
CXL = "/sys/bus/cxl/devices"


def key(serials: tuple[int, ...] | list[int]) -> str:
    """A set's identity: its serials in position order (what ownership records and the boot apply key on)."""
    return "+".join(f"{s:#x}" for s in serials)


def target(serials: tuple[int, ...] | list[int]) -> str:
    return f"region@{key(serials)}"


def rules_of(loaded: Any) -> tuple[Any, ...]:
    """The profile's ``memory.cxl.regions`` rules (none for a profile, or a record of one, without them)."""
    cxl = getattr(loaded.profile.memory, "cxl", None)
    return tuple(getattr(cxl, "regions", None) or ()) if cxl is not None else ()

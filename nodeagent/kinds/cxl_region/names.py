"""What every part of the region kind shares, importing nothing heavy (the registry loads it on every command)."""

from __future__ import annotations

from typing import Any

KIND = "cxl_region"
CXL = "/sys/bus/cxl/devices"


def ident(memdev: Any, memdevs: Any) -> str:
    """A memdev's identity across boots: its serial (``0x4c454f0001``); where that names no one device (0, none,
    or shared by several), its PCI function (``pci:0000:0d:00.0``), which stays as long as the slot does."""
    if memdev.serial and sum(1 for m in memdevs if m.serial == memdev.serial) == 1:
        return f"{memdev.serial:#x}"
    return f"pci:{memdev.pci}" if memdev.pci else memdev.name


def key(idents: Any) -> str:
    """A set's identity: its memdevs' identities in position order (what ownership records and the boot apply
    key on)."""
    return "+".join(i if isinstance(i, str) else f"{i:#x}" for i in idents)


def target(idents: Any) -> str:
    return f"region@{key(idents)}"


def key_of(target: str) -> str:
    """The set's identity a region target names (the inverse of :func:`target`)."""
    return target.removeprefix("region@")


def rules_of(loaded: Any) -> tuple[Any, ...]:
    """The profile's ``memory.cxl.regions`` rules (none for a profile, or a record of one, without them)."""
    cxl = getattr(loaded.profile.memory, "cxl", None)
    return tuple(getattr(cxl, "regions", None) or ()) if cxl is not None else ()

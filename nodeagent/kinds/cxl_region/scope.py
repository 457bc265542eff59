"""``apply --device memN``: what a memdev's udev event concerns besides the memdev (read-only)."""

from __future__ import annotations

import os

from ...host import Host
from .names import CXL


def memdev_scope(host: Host, memdev: str) -> set[str]:
    """The regions ``memdev`` is in (through its endpoint's decoders) and their DAX devices."""
    out: set[str] = set()
    for region in (n for n in host.fs.listdir(CXL) if n.startswith("region")):
        for attr in host.fs.listdir(f"{CXL}/{region}"):
            if not attr.startswith("target"):
                continue
            dec = (host.read_opt(f"{CXL}/{region}/{attr}") or "").strip()
            endpoint = os.path.basename(os.path.dirname(host.fs.readlink(f"{CXL}/{dec}") or "")) if dec else ""
            uport = host.fs.readlink(f"{CXL}/{endpoint}/uport") if endpoint else None
            if uport and os.path.basename(uport) == memdev:
                out.add(region)
                rid = region.removeprefix("region")
                out |= {n for n in host.fs.listdir(f"{CXL}/{region}/dax_region{rid}") if n.startswith("dax")}
    return out

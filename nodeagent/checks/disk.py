"""``disk``: free space and inodes where the node keeps models, caches and logs.

Per path: ``min_free`` (bytes an ordinary process can still write: ``df``'s Avail), ``max_used_percent``
(``df``'s Use%: used / (used + avail), so the root-reserved blocks count as unavailable) and
``min_free_inodes``. Usage comes from ``statvfs`` through the host layer. A path that does not exist is judged
by the filesystem that would hold it (its nearest existing parent) unless ``must_exist: true``.

Example::

    checks:
      disk:
        paths:
          - {path: /models, min_free: 200GiB, max_used_percent: 90}
          - {path: /, min_free: 10GiB, min_free_inodes: 100000}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import HostError, MissingError
from ..facts import Facts
from ..facts.hardware import DiskFacts, Mount, SavedHardware, existing_ancestor, mount_of, read_mounts
from ..host import Host, StatVfs
from ..units import format_size
from .base import CheckContext, Finding

if TYPE_CHECKING:
    from ..profile.checks import DiskCheck, DiskPath


def _gb(n: int) -> str:
    """``120GiB (128.8 GB)``: binary as df -h prints it, decimal as disks are sold."""
    if n < 1024**3:
        return format_size(n)
    gib = n / 1024**3
    return f"{gib:.0f}GiB ({n / 1e9:,.1f} GB)" if gib.is_integer() else f"{gib:.2f}GiB ({n / 1e9:,.1f} GB)"


class DiskCheckImpl:
    name = "disk"

    def run(self, host: Host, spec: DiskCheck, facts: Facts, ctx: CheckContext) -> tuple[list[Finding],
                                                                                          dict[str, Any]]:
        hw = ctx.hardware
        saved = hw.disks() if isinstance(hw, SavedHardware) else None
        mounts = read_mounts(host) if saved is None else [Mount(d.device, d.path, d.fstype) for d in saved]
        findings: list[Finding] = []
        evidence: dict[str, Any] = {"paths": []}
        if saved is not None:
            evidence["offline"] = True
        for item in spec.paths:
            f, ev = self._one(host, item, mounts) if saved is None else self._saved(item, mounts, saved)
            findings += f
            evidence["paths"].append(ev)
        return findings, evidence

    def _saved(self, item: DiskPath, mounts: list[Mount], saved: list[DiskFacts]) -> tuple[list[Finding],
                                                                                            dict[str, Any]]:
        """From a facts file: the usage of the filesystem that holds the path (whether the path itself exists
        was not recorded, so ``must_exist`` cannot be judged offline)."""
        path = item.path
        ev: dict[str, Any] = {"path": path}
        mount = mount_of(mounts, path)
        disk = next((d for d in saved if mount and d.path == mount.path), None)
        if disk is None or disk.usage is None:
            why = disk.error if disk and disk.error else "no filesystem in the saved facts holds it"
            return [Finding("warn", f"{path}: cannot judge offline: {why}", "capture the facts again on the node "
                            "(`nodeagent facts --save FILE`)")], ev
        shown = path if path == disk.path else f"{path} (on {disk.path}: whether the path exists is not in saved facts)"
        out, ev = self._judge(item, path, StatVfs(**disk.usage), mount, ev, shown)
        if item.must_exist and path != disk.path:
            out.append(Finding("pass", f"{path}: must_exist not judged offline (the facts record filesystems, not "
                               "paths)"))
        return out, ev

    def _one(self, host: Host, item: DiskPath, mounts: list) -> tuple[list[Finding], dict[str, Any]]:
        path = item.path
        ev: dict[str, Any] = {"path": path}
        measured = path
        if not host.fs.exists(path):
            if item.must_exist:
                return [Finding("fail", f"{path} does not exist", f"create {path} (or mount its filesystem), or "
                                "fix the path in the profile")], {**ev, "exists": False}
            measured = existing_ancestor(host, path)
            ev["exists"] = False
            ev["measured"] = measured
        try:
            st = host.statvfs(measured)
        except MissingError:
            return [Finding("fail", f"{path}: no such path", "fix the path in the profile")], {**ev, "exists": False}
        except HostError as exc:
            return [Finding("fail", f"{path}: cannot read its usage: {exc.message}", exc.hint)], ev
        return self._judge(item, measured, st, mount_of(mounts, measured), ev)

    @staticmethod
    def _judge(item: DiskPath, measured: str, st: StatVfs, mount: Mount | None, ev: dict[str, Any],
               prefix: str | None = None) -> tuple[list[Finding], dict[str, Any]]:
        path = item.path
        where = f"{mount.path} ({mount.device}, {mount.fstype})" if mount else measured
        ev.update({"mount": mount.path if mount else None, "device": mount.device if mount else None,
                   "size": st.size, "used": st.used, "free": st.free, "used_percent": round(st.used_percent, 1),
                   "inodes": st.files, "inodes_free": st.files_free})
        prefix = prefix or (path if measured == path else f"{path} (missing; measured on {measured})")
        state = f"{st.used_percent:.0f}% used, {_gb(st.free)} free of {_gb(st.size)} on {where}"
        findings: list[Finding] = []
        cleanup = (f"free space on {mount.path if mount else measured}: remove unused model checkpoints and caches "
                   "(e.g. old Hugging Face snapshots, `docker system prune`), or grow the filesystem")
        over: list[str] = []
        if item.max_used_percent is not None and st.used_percent > item.max_used_percent:
            over.append(f"above max_used_percent {item.max_used_percent:g}%")
        if item.min_free is not None and st.free < item.min_free:
            over.append(f"free space below min_free {_gb(item.min_free)}")
        if over:
            findings.append(Finding("fail", f"{prefix}: {state} — {' and '.join(over)}", cleanup))
        if item.min_free_inodes is not None:
            if st.files == 0:
                findings.append(Finding("pass", f"{prefix}: {where} has no fixed inode table; min_free_inodes "
                                        "does not apply"))
            elif st.files_free < item.min_free_inodes:
                findings.append(Finding("fail", f"{prefix}: {st.files_free:,} free inodes of {st.files:,}, below "
                                        f"min_free_inodes {item.min_free_inodes:,}",
                                        "remove many small files (caches, logs) or recreate the filesystem with "
                                        "more inodes"))
        if not any(f.status == "fail" for f in findings):
            findings.append(Finding("pass", f"{prefix}: {state}"))
        return findings, ev

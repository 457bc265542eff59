"""``disk``: free space and inodes where the node keeps models, caches and logs.

Per path: ``min_free`` (bytes an ordinary process can still write: ``df``'s Avail), ``max_used_percent``
(``df``'s Use%: used / (used + avail), so the root-reserved blocks count as unavailable) and
``min_free_inodes``. Usage comes from ``statvfs`` through the host layer. A path that does not exist is judged
by the filesystem that would hold it (its nearest existing parent) unless ``must_exist: true``.

Offline (``check --facts``), a path the facts recorded (``facts --save`` with the profile, or after it was
applied: ``checked_paths``) is judged exactly as on the node — whether it exists, the filesystem it is on. A path
they did not record is placed by the mount table alone: its filesystem's usage is judged, ``must_exist`` cannot
be (a warning), and the check's evidence lists it under ``unresolved``.

Example::

    checks:
      disk:
        paths:
          - {path: /models, min_free: 200GiB, max_used_percent: 90}
          - {path: /, min_free: 10GiB, min_free_inodes: 100000}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..facts.hardware import CheckedPath, Mount, SavedHardware, existing_ancestor, mount_of, read_mounts
from ..host import Host, StatVfs
from ..util.errors import HostError, MissingError
from ..util.quantities import format_size
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
        saved = hw if isinstance(hw, SavedHardware) else None
        findings: list[Finding] = []
        evidence: dict[str, Any] = {"paths": []}
        if saved is None:
            mounts = read_mounts(host)
            for item in spec.paths:
                f, ev = self._one(host, item, mounts)
                findings += f
                evidence["paths"].append(ev)
            return findings, evidence
        evidence["offline"] = True
        recorded = saved.checked_paths()
        points = {m.path for m in saved.mounts()}  # a mount point exists, and its filesystem is known
        unresolved = [item.path for item in spec.paths if item.path not in recorded and item.path not in points]
        profile = saved.checked_paths_profile()
        why = (f"the facts hold the disk paths of profile {profile!r}, not this one" if profile else
               "the facts were saved without a profile")
        for item in spec.paths:
            cp = recorded.get(item.path)
            f, ev = self._recorded(item, cp) if cp is not None else self._by_mount(item, saved, why)
            findings += f
            evidence["paths"].append(ev)
        if unresolved:
            evidence["unresolved"] = unresolved
            evidence["unresolved_why"] = why
        return findings, evidence

    def _recorded(self, item: DiskPath, cp: CheckedPath) -> tuple[list[Finding], dict[str, Any]]:
        """A path the facts recorded as the node saw it: judged exactly as :meth:`_one` judges it live."""
        path = item.path
        ev: dict[str, Any] = {"path": path}
        if not cp.exists:
            if item.must_exist:
                return [Finding("fail", f"{path} does not exist", f"create {path} (or mount its filesystem), or "
                                "fix the path in the profile")], {**ev, "exists": False}
            ev["exists"] = False
            ev["measured"] = cp.measured
        if cp.usage is None:
            return [Finding("fail", f"{path}: cannot read its usage: {cp.error}", None)], ev
        mount = Mount(cp.device or "", cp.mount, cp.fstype or "") if cp.mount else None
        return self._judge(item, cp.measured, StatVfs(**cp.usage), mount, ev)

    def _by_mount(self, item: DiskPath, saved: SavedHardware, why_not: str) -> tuple[list[Finding], dict[str, Any]]:
        """A path the facts did not record: the usage of the filesystem the mount table places it on; whether the
        path itself exists is unknown, so ``must_exist`` is not judged (a warning says so)."""
        path = item.path
        ev: dict[str, Any] = {"path": path, "resolved": "by mount point"}
        mount = mount_of(saved.mounts(), path)
        disk = next((d for d in saved.disks() if mount and d.path == mount.path), None)
        recapture = "capture the facts on the node with this profile: `nodeagent facts --save FILE --profile PROFILE`"
        if disk is None or disk.usage is None:
            why = (disk.error if disk and disk.error else f"it is on {mount.path} ({mount.fstype}), whose usage the "
                   "facts do not record" if mount else "no filesystem in the saved facts holds it")
            return [Finding("warn", f"{path}: cannot judge offline: {why}", recapture)], ev
        shown = path if path == disk.path else (f"{path} (not resolved: {why_not}; placed on {disk.path} by the "
                                                "mount table)")
        out, ev = self._judge(item, path, StatVfs(**disk.usage), mount, ev, shown)
        if item.must_exist and path != disk.path:
            out.append(Finding("warn", f"{path}: must_exist cannot be judged offline: the facts do not record "
                               f"whether the path exists ({why_not})", recapture))
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

"""``advisories.json`` (:class:`AdvisoriesShown`): which advisories a person has been shown in full, per profile
(name and digest) and kernel release — so that the boot unit's apply, the drift timer and a converged Ansible run
say each advisory once and then count it in one line (``nodeagent plan --advice`` prints them all).

An advisory is kept by its id (:func:`advisory_id`): a digest of its text with the numbers that stand alone left
out (``600s old``, ``74.84GiB free``, a profile's line ``:65:7``), so that a measured value moving does not make it
new, while names that carry digits (``dax1.0``, ``node3``, ``demote-cold-node0``) keep two advisories apart. A
changed profile (another digest) or another kernel release is another key: its advisories are new again.

Only commands that write the state anyway record (``apply``, ``drift --record``, the Ansible module outside
check mode); ``plan``, ``drift`` and every dry run only read the file (see ``docs/cli.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from ..profile.resolved import sha256
from ..util.timestamps import rfc3339
from .records import FORMAT, Record, _version
from .shape import _obj, _stamp, _str

#: Profile+kernel keys kept (the most recently recorded): a node that boots its last few kernels or switches
#: between a few profiles does not see the same advisories again each time.
KEEP_KEYS = 8
#: Advisory ids kept per key: a bound on a file that an advisory with a changing word would grow.
KEEP_IDS = 256
#: How much of an advisory's text the file keeps beside its id, for a person reading the file.
TEXT = 160

_NUMBER = re.compile(r"(?<![A-Za-z_\d.])\d+(?:\.\d+)*")


def advisory_id(text: str) -> str:
    """A stable id for an advisory's text: its words and names, not the numbers that stand alone in it."""
    norm = " ".join(_NUMBER.sub("#", text).split())
    return sha256(norm.encode("utf-8", "surrogatepass"))[:16]


def key(profile: str, digest: str, kernel: str) -> str:
    return f"{profile}@{digest[:12]} on {kernel or '?'}"


class Shown(NamedTuple):
    """The advisories shown for one profile on one kernel: id → the start of its text."""

    profile: str
    profile_digest: str
    kernel: str
    time: str  # RFC 3339: when an advisory was last added
    advisories: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "profile_digest": self.profile_digest, "kernel": self.kernel,
                "time": self.time, "advisories": dict(sorted(self.advisories.items()))}

    @classmethod
    def from_json(cls, d: Any, where: str) -> Shown:
        d = _obj(d, where)
        ids = _obj(d.get("advisories"), f"{where}.advisories", {})
        return cls(_str(d.get("profile"), f"{where}.profile", optional=False) or "",
                   _str(d.get("profile_digest"), f"{where}.profile_digest", optional=False) or "",
                   _str(d.get("kernel"), f"{where}.kernel", optional=False) or "",
                   _stamp(d.get("time"), f"{where}.time") or "",
                   {str(i): str(_str(t, f"{where}.advisories.{i}", optional=False)) for i, t in ids.items()})


class AdvisoriesShown(Record):
    """``{key: Shown}`` (:func:`key`: profile, digest, kernel). Empty: nothing shown yet (or an older nodeagent's
    state directory, which had no such file)."""

    __slots__ = ("shown",)
    FILE = "advisories.json"
    KEYED = (("shown",),)
    HOLDS = "the record of the advisories already shown"

    def __init__(self, shown: dict[str, Shown] | None = None) -> None:
        self.shown = shown or {}

    def __bool__(self) -> bool:
        return bool(self.shown)

    def ids(self, profile: str, digest: str, kernel: str) -> frozenset[str]:
        """The ids of the advisories shown for this profile on this kernel."""
        entry = self.shown.get(key(profile, digest, kernel))
        return frozenset(entry.advisories) if entry is not None else frozenset()

    def add(self, profile: str, digest: str, kernel: str, texts: Iterable[str]) -> bool:
        """Record ``texts`` as shown for this profile on this kernel; False when every one already was."""
        k = key(profile, digest, kernel)
        entry = self.shown.get(k)
        have = dict(entry.advisories) if entry is not None else {}
        new = {advisory_id(t): t[:TEXT] for t in texts}
        new = {i: t for i, t in new.items() if i not in have}
        if not new:
            return False
        ids = {**dict(list(have.items())[:max(0, KEEP_IDS - len(new))]), **new}
        self.shown.pop(k, None)  # the latest key last: what KEEP_KEYS keeps
        self.shown[k] = Shown(profile, digest, kernel, rfc3339(), ids)
        for old in sorted(self.shown, key=lambda s: self.shown[s].time)[:-KEEP_KEYS]:
            del self.shown[old]
        return True

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "shown": {k: s.to_json() for k, s in sorted(self.shown.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdvisoriesShown:
        _version(data, cls.FILE)  # one layout since it was added
        return cls({str(k): Shown.from_json(s, f"shown.{k}")
                    for k, s in _obj(data.get("shown"), "shown", {}).items()})

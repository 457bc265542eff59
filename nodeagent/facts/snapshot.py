"""Facts files: a node captured for offline planning (``nodeagent facts --save``, ``plan --facts``).

A facts file is one JSON object::

    {
      "format": "nodeagent-facts/v2",          # the version of this format (the rule below)
      "hostname": "gpu-17", "kernel_release": "6.12.0-...", "simulated": null,
      "knobs": {"kernel.numa_balancing": "0", ...},   # each managed knob's raw kernel text, null when absent
      "block_size_bytes": 2147483648, "possible_nodes": [0, 1, 2, 3],
      "nodes": [{"id": 0, "cpulist": "0-47", "has_memory": true, ...}, ...],
      "tiers": [{"tier": 4, "nodes": [0, 1]}, ...],
      "sections": {...},                        # one entry per further fact section (DAX devices, DAMON...)
                                                # and "hardware" (v2): CPU, GPUs and display-only devices with
                                                # their PCIe links, filesystems with their usage, every mount
                                                # point ("mounts") and the disk check's paths as the node saw
                                                # them ("checked_paths": {profile, paths: [{path, exists,
                                                # measured, mount, device, fstype, usage}]}) (facts.hardware)
      "state": {"last_applied": {...}, "originals": {...}, "ownership": {...}},   # nodeagent's own records
      "captured": {"time": "2025-...", "nodeagent": "0.1.0"},
      "checks": {"results": [...]}               # optional: a `nodeagent check --format json` report of the node
    }

The version rule: a change that an older reader would misread (a field renamed, a meaning changed, a section
offline checks rely on) takes the next version; adding an optional field does not. This nodeagent reads the
current format and the previous one (v1 has no hardware section: offline checks that need it say so), and
refuses a newer one with exit 65 ("written by a newer nodeagent"), as it refuses an older one it cannot read.
``mounts`` and ``checked_paths`` are such optional additions to v2: a v2 file without them is read, and the disk
check says offline which paths it could only place by mount point.

It holds what the planner and the offline checks read and nothing else: kernel attributes nodeagent manages,
the NUMA layout, the hardware, and nodeagent's own records (what it created, what it last applied). No
environment, no credentials, no file contents outside nodeagent's scope. Planning against it
(:func:`nodeagent.engine.review.plan_offline`) is the same pure
``make_plan`` the node runs, so the plan is the one the node would make.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..util import jsonin
from ..util.errors import ExitCode, NodeagentError, UsageError
from . import FORMAT, READS, SECTIONS, Facts

SUFFIX = ".json"


class FactsFileError(NodeagentError):
    """A facts file that cannot be read or is not a facts document this nodeagent understands."""

    exit_code = ExitCode.INVALID_PROFILE


@dataclass(frozen=True)
class Snapshot:
    """One node's facts and nodeagent state, from a file or gathered live."""

    source: str  # the facts file, or "live" when gathered from the node
    facts: Facts
    state: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    captured: dict[str, Any] = field(default_factory=dict)  # when, and by which nodeagent version
    checks: list[dict[str, Any]] | None = None  # check results captured with the facts, if any

    @property
    def label(self) -> str:
        """How a review names the node: the file's stem, then the host it was captured on."""
        node = self.facts.hostname or "node"
        if self.facts.simulated:
            node += f" (simulated {self.facts.simulated})"
        if self.source == "live":
            return node
        stem = Path(self.source).stem
        return node if stem == self.facts.hostname else f"{stem}: {node}"


#: The section of the hardware facts (gathered only on request: see :func:`nodeagent.ops.capture.capture`).
HARDWARE = "hardware"


def _version(fmt: str) -> int | None:
    m = re.fullmatch(r"nodeagent-facts/v(\d+)", fmt)
    return int(m.group(1)) if m else None


def to_document(snap: Snapshot) -> dict[str, Any]:
    """The JSON document of a facts file (see the module docstring)."""
    return {**snap.facts.to_dict(), "state": snap.state, "captured": snap.captured}


def save(snap: Snapshot, path: str | Path) -> None:
    """Write the facts file atomically; only a regular file is replaced (a FIFO there would block forever)."""
    from ..host.files import write_operator_file

    write_operator_file(path, json.dumps(to_document(snap), indent=2) + "\n", option="--save")


MAX_FACTS_BYTES = 64 * 1024 * 1024  # a facts file of a node with terabytes of hot-plugged blocks is a few MiB


def read(path: str | Path) -> Snapshot:
    """Read one facts file; every way it can be wrong is a :class:`FactsFileError` naming the file."""
    p = Path(path)
    shown = str(path)
    from ..host.files import InputFileError, read_regular

    if not os.path.lexists(p):
        raise UsageError(f"--facts {shown}: no such file or directory",
                         hint="capture one on the node with `nodeagent facts --save FILE`")
    try:  # only a regular file, bounded by reading (a FIFO or /dev/zero must not hang or fill memory)
        text = read_regular(p, MAX_FACTS_BYTES).decode("utf-8")
    except InputFileError as exc:
        raise FactsFileError(f"{shown}: cannot read the facts file: {exc}",
                             hint=exc.hint or "capture one on the node with `nodeagent facts --save FILE`") from None
    except UnicodeDecodeError as exc:
        raise FactsFileError(f"{shown}: cannot read the facts file: not UTF-8 text (byte {exc.start})") from None
    try:
        doc = jsonin.loads(text)
    except ValueError as exc:
        raise FactsFileError(f"{shown}: not JSON ({exc})",
                             hint="a facts file is what `nodeagent facts --save FILE` writes") from None
    return from_document(doc, shown)


def from_document(doc: Any, shown: str) -> Snapshot:
    if not isinstance(doc, dict) or "format" not in doc:
        raise FactsFileError(f"{shown}: not a nodeagent facts file (no \"format\" field)",
                             hint="a facts file is what `nodeagent facts --save FILE` writes")
    fmt = doc["format"]
    if fmt not in READS:
        version = _version(fmt) if isinstance(fmt, str) else None
        reads = " and ".join(READS)
        if version is not None and version > (_version(FORMAT) or 0):
            raise FactsFileError(f"{shown}: facts format {fmt} was written by a newer nodeagent; this one reads "
                                 f"{reads}", hint="upgrade nodeagent where you plan, or capture the facts with "
                                 "this version (`nodeagent facts --save FILE`)")
        if version is not None:
            raise FactsFileError(f"{shown}: facts format {fmt} is too old; this nodeagent reads {reads}",
                                 hint="capture the facts again with this nodeagent version "
                                      "(`nodeagent facts --save FILE`)")
        raise FactsFileError(f"{shown}: not a nodeagent facts file (format {fmt!r}, expected {FORMAT!r})")
    try:
        facts = Facts.from_dict(doc)
    except KeyError as exc:
        raise FactsFileError(f"{shown}: {FORMAT} document without the required field {exc.args[0]!r}",
                             hint="capture the facts again with `nodeagent facts --save FILE`") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise FactsFileError(f"{shown}: malformed {FORMAT} document ({exc})",
                             hint="capture the facts again with `nodeagent facts --save FILE`") from None
    state = doc.get("state") or {}
    if not isinstance(state, dict):
        raise FactsFileError(f"{shown}: \"state\" must be an object, got {type(state).__name__}")
    warnings = []
    missing = sorted(set(SECTIONS) - set(facts.sections))
    if missing:
        warnings.append(f"{shown} has no {', '.join(missing)} facts (captured by an older nodeagent?): "
                        "the plan for them is incomplete; capture the facts again")
    captured = doc.get("captured") if isinstance(doc.get("captured"), dict) else {}
    return Snapshot(shown, facts, state, tuple(warnings), captured, _checks(doc.get("checks")))


def _checks(doc: Any) -> list[dict[str, Any]] | None:
    """The results of a check report stored beside the facts (``nodeagent check --format json``), if any."""
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        return [r for r in doc["results"] if isinstance(r, dict)]
    return None


def read_all(path: str | Path) -> list[Snapshot]:
    """One facts file, or every ``*.json`` in a directory (sorted by name; subdirectories are not searched)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.name.endswith(SUFFIX) and f.is_file())
        if not files:
            raise UsageError(f"--facts {path}: no *.json facts files in this directory",
                             hint="capture them on each node with `nodeagent facts --save NAME.json`")
        return [read(f) for f in files]
    return [read(p)]

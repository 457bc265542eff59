"""Saved plans: ``nodeagent plan --out FILE`` writes the plan a person reviewed; ``nodeagent apply --plan FILE``
carries out exactly that plan, or refuses (exit 5, nothing written) when the node or the profile changed since, as
``terraform plan -out`` / ``terraform apply FILE`` do.

A plan is a pure function of the profile and the node's facts, so "exactly that plan" is checked where it matters:
apply plans afresh under its lock, before its first write, and goes ahead only when the profile has the digest it
had and every change is the one saved (the same setting, operation, before and after). Anything else is named.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .. import __version__
from ..util.errors import ExitCode, NodeagentError, ProfileError, UsageError
from ..util.timestamps import rfc3339

FORMAT = "nodeagent-saved-plan"
VERSION = 1


class StalePlanError(NodeagentError):
    """The node or the profile changed since the plan was saved: nothing was written."""

    exit_code = ExitCode.PARTIAL


def write(path: str, loaded: Any, plan: Any, allow_disruptive: bool) -> None:
    """The plan, with what it was made from, as one JSON document (written atomically, mode 0644)."""
    from ..host.files import write_operator_file

    doc = {"format": FORMAT, "format_version": VERSION, "nodeagent": __version__, "created": rfc3339(),
           "profile": loaded.name, "profile_path": os.path.abspath(loaded.path), "profile_digest": loaded.digest,
           "allow_disruptive": allow_disruptive, "plan": plan.to_dict()}
    try:
        write_operator_file(path, json.dumps(doc, indent=2, default=str) + "\n", option="--out")
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write: {exc.strerror or exc}") from None


#: A saved plan is read whole; a plan of every change of a large node stays well below this.
MAX_BYTES = 64 * 1024 * 1024


def read(path: str) -> dict[str, Any]:
    """A saved plan, or exit 65 saying what is wrong with the file."""
    from ..host.files import InputFileError, read_regular
    from ..util import jsonin

    try:  # an operator's file: regular, bounded (a FIFO or /dev/zero is refused, never waited on)
        doc = jsonin.loads(read_regular(path, MAX_BYTES))
    except InputFileError as exc:
        if not os.path.lexists(path):
            raise UsageError(f"--plan {path}: no such file",
                             hint="save one with `nodeagent plan PROFILE --out FILE`") from None
        raise ProfileError([f"{path}: not a saved plan: {exc}"],
                           hint=exc.hint or "save one with `nodeagent plan PROFILE --out FILE`") from None
    except ValueError as exc:
        raise ProfileError([f"{path}: not a saved plan: {exc}"],
                           hint="save one with `nodeagent plan PROFILE --out FILE`") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ProfileError([f"{path}: not a saved plan (no \"format\": \"{FORMAT}\")"],
                           hint="save one with `nodeagent plan PROFILE --out FILE`")
    if doc.get("format_version") != VERSION:
        raise ProfileError([f"{path}: saved plan format_version {doc.get('format_version')!r}; this nodeagent "
                            f"({__version__}) reads {VERSION}"], hint="plan again with this nodeagent")
    for key in ("profile_path", "profile_digest", "plan"):
        if key not in doc:
            raise ProfileError([f"{path}: saved plan without {key!r}"], hint="plan again")
    return doc


def _key(c: dict[str, Any]) -> tuple[str, str]:
    return str(c.get("kind")), str(c.get("target"))


def _shown(c: dict[str, Any]) -> str:
    before = c.get("before_label") if c.get("before_label") is not None else c.get("before")
    after = c.get("after_label") if c.get("after_label") is not None else c.get("after")
    return f"{c.get('op')} {before} → {after}"


def _norm(c: dict[str, Any]) -> str:
    return json.dumps({k: c.get(k) for k in ("kind", "target", "op", "before", "after", "disruptive")},
                      sort_keys=True, default=str)


def differences(saved: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """What the plan made now does differently from the saved one, one line per setting."""
    old = {_key(c): c for c in saved.get("changes", [])}
    new = {_key(c): c for c in fresh.get("changes", [])}
    out = []
    for key in sorted(old.keys() | new.keys()):
        target = key[1]
        if key not in new:
            out.append(f"{target}: saved {_shown(old[key])}; now nothing to do (already as the profile wants)")
        elif key not in old:
            out.append(f"{target}: not in the saved plan; now {_shown(new[key])}")
        elif _norm(old[key]) != _norm(new[key]):
            out.append(f"{target}: saved {_shown(old[key])}; now {_shown(new[key])}")
    saved_problems = {p.get("message") for p in saved.get("problems", [])}
    for p in fresh.get("problems", []):
        if p.get("message") not in saved_problems:
            out.append(f"new problem: {p.get('message')}")
    return out


def check(saved_doc: dict[str, Any], path: str, loaded: Any, fresh_plan: Any) -> None:
    """Refuse (exit 5) unless the plan made now is the saved one."""
    if loaded.digest != saved_doc["profile_digest"]:
        raise StalePlanError(f"the saved plan {path} is stale: the profile {saved_doc['profile_path']} changed since "
                             f"it was saved ({saved_doc.get('created')}); nothing was written",
                             hint="review it again: nodeagent plan PROFILE --out FILE")
    diff = differences(saved_doc["plan"], fresh_plan.to_dict())
    if diff:
        listed = "\n  ".join(diff)
        raise StalePlanError(f"the saved plan {path} is stale: the node changed since it was saved "
                             f"({saved_doc.get('created')}); nothing was written:\n  {listed}",
                             hint="review the new plan: nodeagent plan PROFILE --out FILE, then apply --plan FILE")

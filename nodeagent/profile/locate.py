"""Where things live on a node: its profile at ``/etc/nodeagent/profile.yaml`` (under ``--root``).

Which profile a command uses, first match wins:

1. the PROFILE the command was given;
2. for ``drift`` and ``status``: the profile last applied to the node (they say so when the file it was
   read from changed since); for ``units render|install``: the file it was read from, while it is there;
3. for ``apply``, ``plan``, ``check``, ``validate`` and ``units render|install``: ``/etc/nodeagent/profile.yaml``,
   whose ``extends`` resolve against ``/etc/nodeagent``;
4. else exit 65, naming the place a profile is looked for.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..util.errors import ProfileError

if TYPE_CHECKING:
    from ..host import Host

PROFILE_DIR = "/etc/nodeagent"
PROFILE_PATH = f"{PROFILE_DIR}/profile.yaml"


def under_root(host: Host, path: str) -> str:
    """``path`` (as the node sees it) as this machine sees it: inside the root (the rooted resolver's mapping)."""
    return str(host.fs.local(path))


def node_profile(host: Host, command: str) -> str:
    """The node's standard profile (for ``command``), or exit 65 saying where it was looked for."""
    path = under_root(host, PROFILE_PATH)
    if not os.path.lexists(path):
        where = PROFILE_PATH if host.is_real else f"{PROFILE_PATH} under {host.root}"
        raise ProfileError([f"{command}: no PROFILE given, and the node has no profile at {where}"],
                           hint=f"give the profile: nodeagent {command} PROFILE, or put the node's profile at "
                                f"{PROFILE_PATH} (its extends are read from {PROFILE_DIR})")
    if not host.is_real:
        real, root = os.path.realpath(path), os.path.realpath(host.root)
        if os.path.commonpath([real, root]) != root:
            raise ProfileError([f"{path}: a symbolic link out of the root ({root})"],
                               hint=f"make {PROFILE_PATH} a file inside the root")
    return path


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def changed_since_applied(last: dict[str, Any]) -> str | None:
    """A note when the file the last applied profile came from changed (or went away) after that apply."""
    path, applied = last.get("profile_path"), _epoch(last.get("time"))
    if not isinstance(path, str) or applied is None:
        return None
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return f"{path}, applied at {last.get('time')}, is no longer there: drift is measured against what " \
               "was applied"
    except OSError:
        return None
    if mtime <= applied + 1:  # timestamps are whole seconds
        return None
    changed = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    return (f"{path} changed at {changed}, after it was applied ({last.get('time')}): drift is measured against "
            f"what was applied; `nodeagent plan` shows what the new file would change")

"""The simulated node: an emulated kernel behind a directory tree, for tests, benchmarks and rehearsals.

``create(dir, preset)`` lays one out; ``cached(preset)`` creates or reuses one under the cache directory
(``$NODEAGENT_CACHE``, else ``$XDG_CACHE_HOME/nodeagent``, else ``~/.cache/nodeagent``) for ``--simulate``.
Production code never imports this package: the host layer loads :mod:`nodeagent.sim.kernel` only when a
root carries the simulator's marker.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict
from pathlib import Path

from . import hardware as _hardware  # noqa: F401  (registers the hardware layout step)
from .kernel import MARKER, SimKernel
from .presets import PRESETS, Preset, build, create, get, large, layer_names, remove

__all__ = ["MARKER", "PRESETS", "Preset", "SimKernel", "build", "cache_dir", "cached", "create", "get", "large",
           "remove"]


def cache_dir() -> Path:
    if os.environ.get("NODEAGENT_CACHE"):
        return Path(os.environ["NODEAGENT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nodeagent"


def _current(root: Path, name: str) -> bool:
    """True when ``root`` holds a node of preset ``name`` as this version lays it out (same spec, same layers)."""
    try:
        meta = json.loads((root / MARKER / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    spec = json.loads(json.dumps(asdict(get(name)), default=str))
    return meta.get("spec") == spec and meta.get("layers") == layer_names()


def cached(name: str) -> Path:
    """The cached simulated node of preset ``name``, created on first use (safe across processes)."""
    get(name)  # unknown preset -> KeyError before anything is made
    base = cache_dir() / "sim"
    base.mkdir(parents=True, exist_ok=True)
    root = base / name
    with open(base / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _current(root, name):
            tmp = base / f".{name}.tmp-{os.getpid()}"
            if tmp.exists():
                remove(tmp)
            create(tmp, name)
            if root.exists():
                stale = base / f".{name}.broken-{os.getpid()}"
                os.rename(root, stale)
                try:
                    remove(stale)  # laid out by an older version: nothing in it is worth keeping
                except (OSError, ValueError):
                    pass
            os.rename(tmp, root)
    return root

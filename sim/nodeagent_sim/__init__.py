"""The simulated node: an emulated kernel behind a directory tree, for tests, benchmarks and rehearsals.

``create(dir, preset)`` lays one out; ``cached(preset)`` creates or reuses one under the cache directory
(``$NODEAGENT_CACHE``, else ``$XDG_CACHE_HOME/nodeagent``, else ``~/.cache/nodeagent``) for ``--simulate``.
Production code never imports this package: the host layer loads :mod:`nodeagent_sim.kernel` only when a
root carries the simulator's marker.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from . import hardware as _hardware  # noqa: F401  (registers the hardware layout step)
from . import latency as _latency  # noqa: F401  (registers the L3, HMAT and latency-model step)
from . import nvidia as _nvidia  # noqa: F401  (after hardware: its nvidia-smi and NVML replace hardware's)
from .kernel import MARKER, SimKernel
from .presets import PRESETS, Preset, build, create, get, large, remove

__all__ = ["MARKER", "PRESETS", "Preset", "SimKernel", "build", "cache_dir", "cached", "create", "fingerprint", "get",
           "large", "remove"]


def cache_dir() -> Path:
    if os.environ.get("NODEAGENT_CACHE"):
        return Path(os.environ["NODEAGENT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nodeagent"


def fingerprint() -> str:
    """A digest of the simulator's own code: a cached node made by other code is made again."""
    import hashlib  # (OpenSSL: ~3 ms to load; only to name a cached node)

    h = hashlib.sha256()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def cached(name: str) -> Path:
    """The cached simulated node of preset ``name``, created on first use (safe across processes).

    Nodes are kept per version of the simulator's code (``<cache>/sim/<fingerprint>/<preset>``), so a node made
    by other code is never reused, and never removed under another process that still uses it.
    """
    get(name)  # unknown preset -> KeyError before anything is made
    base = cache_dir() / "sim" / fingerprint()
    base.mkdir(parents=True, exist_ok=True)
    root = base / name
    with open(base / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / MARKER / "meta.json").is_file():
            tmp = base / f".{name}.tmp-{os.getpid()}"
            if tmp.exists():
                remove(tmp)
            create(tmp, name)
            if root.exists():
                stale = base / f".{name}.broken-{os.getpid()}"
                os.rename(root, stale)
                try:
                    remove(stale)  # a half-made node: nothing in it is worth keeping
                except (OSError, ValueError):
                    pass
            os.rename(tmp, root)
    return root


def cached_path(name: str) -> Path:
    """Where :func:`cached` keeps the node of preset ``name`` for this version of the simulator."""
    return cache_dir() / "sim" / fingerprint() / name

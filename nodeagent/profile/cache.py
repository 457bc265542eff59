"""The validated-profile cache: load a profile without YAML or pydantic when none of its files changed.

An entry is keyed by the profile's absolute path and holds the validated profile in its plain form
(:func:`nodeagent.profile.resolved.to_record`) with the sha256 of every file of its ``extends`` chain, the versions of
nodeagent, pydantic and pydantic-core that validated it, and the size and modification time of each file of
nodeagent's profile model (a model changed under the same ``__version__``, as in a checkout, is no match). It is
used only when every one of those files still has its digest and everything else is the same; anything else (an
edit anywhere in the chain, an upgrade, a damaged entry) loads and validates the profile again and replaces the
entry. A profile that fails validation is never cached, so its errors are shown every time.

Entries live in ``$NODEAGENT_CACHE/profiles`` (else ``$XDG_CACHE_HOME/nodeagent/profiles``, else
``~/.cache/nodeagent/profiles``), written atomically (mode 0600, directory 0700); an entry owned by another user
or writable by others is ignored. ``NODEAGENT_PROFILE_CACHE=0`` turns the cache off. A cache that cannot be
written (a read-only home) only costs the speed.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from .. import __version__
from .resolved import ResolvedProfile, from_record, sha256, to_record

if TYPE_CHECKING:
    from pathlib import Path


def cache_dir() -> str:
    if os.environ.get("NODEAGENT_CACHE"):
        return os.path.join(os.environ["NODEAGENT_CACHE"], "profiles")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nodeagent", "profiles")


def _dist_version(name: str) -> str:
    """A distribution's version from its ``.dist-info`` directory name, without importing it (or
    importlib.metadata, which costs more than the cache saves)."""
    prefix = name.replace("-", "_").lower() + "-"  # dist-info names spell the project name with "_"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info") and n.lower().startswith(prefix):
                return n[len(prefix):-len(".dist-info")]
    return "?"


def _model_code(here: str = os.path.dirname(__file__)) -> str:
    """The size and modification time of each file of the code that validates and records a profile (this
    ``profile`` package, ``resolved.py`` with it) — what python itself checks its bytecode cache against — so
    that a checkout or an upgrade that changes the model without changing ``__version__`` validates again."""
    out = []
    try:
        names = sorted(n for n in os.listdir(here) if n.endswith(".py"))
    except OSError:
        return ""
    for n in names:
        try:
            st = os.stat(os.path.join(here, n))
        except OSError:
            continue
        out.append(f"{os.path.basename(here)}/{n}:{st.st_size}:{st.st_mtime_ns}")
    return ";".join(out)


def versions() -> dict[str, str]:
    return {"nodeagent": __version__, "pydantic": _dist_version("pydantic"),
            "pydantic-core": _dist_version("pydantic-core"), "model": _model_code()}


#: A cache entry holds one validated profile in plain form: a few hundred KiB at most.
MAX_ENTRY_BYTES = 16 * 1024 * 1024


def _read(path: str | Path) -> bytes:
    """A file of the chain, through the one bounded reader (a FIFO or ``/dev/zero`` is refused, never waited on
    or read without end); :class:`~nodeagent.host.files.InputFileError` (a ValueError) otherwise."""
    from ..host.files import MAX_PROFILE_BYTES, read_regular

    return read_regular(path, MAX_PROFILE_BYTES)


def _sha(path: str) -> str | None:
    try:
        return sha256(_read(path))
    except ValueError:  # not a readable regular file of a profile's size: no match, the load reports it
        return None


#: The digest of a file that must stay absent: a bare name in ``extends`` that resolved to a shipped profile.
ABSENT = "absent"


def _entry_path(path: str | os.PathLike[str]) -> str:
    return os.path.join(cache_dir(), sha256(os.fspath(path).encode())[:32] + ".json")


def chain_files(path: Path) -> dict[str, str]:
    """``{absolute path: sha256}`` of ``path`` and every file it extends, transitively, and :data:`ABSENT` for a
    bare name that resolved to a shipped profile (already validated, so the ``extends`` values are known to be
    good; read with plain YAML, positions are not needed here)."""
    import yaml

    from . import shipped

    out: dict[str, str] = {}
    todo = [path.resolve()]
    while todo:
        p = todo.pop()
        if str(p) in out:
            continue
        raw = _read(p)
        out[str(p)] = sha256(raw)
        doc = yaml.safe_load(raw)
        ext = doc.get("extends") if isinstance(doc, dict) else None
        for item in ext if isinstance(ext, list) else [ext] if ext else []:
            target = shipped.extends_target(p.parent, str(item))
            if shipped.is_shipped(target) and target != (p.parent / str(item)).resolve():
                out.setdefault(str((p.parent / str(item)).resolve()), ABSENT)  # a file put there would win
            todo.append(target)
    return out


def lookup(path: str | Path) -> ResolvedProfile | None:
    """The cached profile at ``path`` if its entry is still good, else ``None``."""
    if os.environ.get("NODEAGENT_PROFILE_CACHE") == "0":
        return None
    real = os.path.realpath(path)  # (as Path.resolve(), without loading pathlib)
    from ..host.files import read_regular_stat

    try:
        raw, st = read_regular_stat(_entry_path(real), MAX_ENTRY_BYTES)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None  # an entry someone else could have written is not trusted as validated
        entry = json.loads(raw)
    except (OSError, ValueError, RecursionError):  # no entry, not a regular file, too large, not JSON, too deep
        return None
    if not isinstance(entry, dict) or entry.get("versions") != versions() or entry.get("shown") != str(path):
        return None
    rec = entry.get("profile")
    files = rec.get("files") if isinstance(rec, dict) else None
    if not isinstance(files, dict) or real not in files:
        return None
    if any((_sha(f) or ABSENT) != digest for f, digest in files.items()):
        return None
    try:
        return from_record(rec)
    except ValueError:
        return None


def store(path: str | Path, loaded: Any) -> None:
    """Keep ``loaded`` (just validated from ``path``) for the next run; never fails the command."""
    if os.environ.get("NODEAGENT_PROFILE_CACHE") == "0":
        return
    from pathlib import Path  # only on a miss, like YAML and pydantic

    real = Path(path).resolve()
    try:
        entry = {"versions": versions(), "shown": str(path), "profile": to_record(loaded, chain_files(real))}
        target = Path(_entry_path(str(real)))
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        import tempfile  # only on a miss (it loads random and shutil)

        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, ValueError, TypeError, RecursionError):
        pass


def load(path: str) -> Any:
    """The validated profile at ``path``: from the cache when every file of its chain is unchanged, else loaded
    and validated (:func:`nodeagent.profile.load_profile`, which reports errors) and cached."""
    hit = lookup(path)
    if hit is not None:
        return hit
    from .loaded import load_profile

    loaded = load_profile(path)
    store(path, loaded)
    return loaded

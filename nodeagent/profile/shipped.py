"""The profiles that ship with nodeagent: installed with the package (``nodeagent/profile/shipped/*.yaml``; in a
checkout that directory is the repository's ``profiles/``), listed by ``nodeagent profiles list``.

A shipped profile is known by its name (the file name without ``.yaml``, which is also its ``metadata.name``).
The name works where a profile is named:

- as PROFILE on the command line (``nodeagent plan cxl-inference``) when no file of that name is there;
- in ``extends`` (``extends: [cxl-inference]``) when no file of that name is beside the profile: a node's own
  ``/etc/nodeagent/profile.yaml`` builds on the installed profile and follows it on upgrade.

Stdlib only: the timer's commands read nothing from here unless a profile names a shipped one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: A name, not a path: what a bare ``extends`` entry or PROFILE argument must look like to be looked up here.
NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")


def directory() -> Path:
    """Where the shipped profiles are (the installed package's data, resolved)."""
    return (Path(__file__).parent / "shipped").resolve()


def names() -> list[str]:
    """The shipped profiles' names, sorted."""
    try:
        return sorted(n.removesuffix(".yaml") for n in os.listdir(directory()) if n.endswith(".yaml"))
    except OSError:
        return []


def find(name: str) -> Path | None:
    """The shipped profile called ``name`` (``cxl-inference``, also ``cxl-inference.yaml``), else ``None``."""
    stem = name.removesuffix(".yaml")
    if not NAME.fullmatch(stem) or stem not in names():
        return None
    return directory() / f"{stem}.yaml"


def extends_target(parent: Path, value: str) -> Path:
    """What an ``extends`` entry ``value`` in a file of directory ``parent`` names: the file beside it when there
    is one, else the shipped profile of that name, else the (missing) file beside it, for the error."""
    beside = (parent / value).resolve()
    if beside.exists() or not NAME.fullmatch(value):
        return beside
    return find(value) or beside


def is_shipped(path: Path) -> bool:
    d = directory()
    return path.resolve().parent == d

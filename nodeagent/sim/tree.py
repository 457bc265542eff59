"""Laying out files of a simulated ``/sys``, ``/proc`` and ``/etc`` with the modes the kernel gives them."""

from __future__ import annotations

import os
from pathlib import Path

RO = 0o444
RW = 0o644
WO = 0o200


class Tree:
    """Writes kernel paths (``/sys/...``) under a root directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def local(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def dir(self, path: str) -> Path:
        p = self.local(path)
        p.mkdir(parents=True, exist_ok=True)
        return p

    def file(self, path: str, content: str | int = "", mode: int = RW) -> None:
        p = self.local(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        _replace(p, _text(content), mode)

    def link(self, path: str, target: str) -> None:
        """A symlink at ``path`` pointing to the relative ``target`` (as sysfs links are)."""
        p = self.local(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        os.symlink(target, p)

    def read(self, path: str) -> str:
        return self.local(path).read_text().rstrip("\n")

    def set(self, path: str, content: str | int) -> None:
        """Replace a file's content keeping its mode (what the kernel does to its own attributes)."""
        p = self.local(path)
        _replace(p, _text(content), p.stat().st_mode & 0o777)

    def exists(self, path: str) -> bool:
        return self.local(path).exists()

    def remove_tree(self, path: str) -> None:
        p = self.local(path)
        if p.is_symlink() or p.is_file():
            p.unlink()
            return
        for dirpath, dirnames, filenames in os.walk(p, topdown=False):
            for name in filenames:
                os.unlink(os.path.join(dirpath, name))
            for name in dirnames:
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    os.unlink(full)
                else:
                    os.rmdir(full)
        os.rmdir(p)


def _text(content: str | int) -> str:
    text = str(content)
    return text + "\n" if text and not text.endswith("\n") else text


def _replace(p: Path, text: str, mode: int) -> None:
    """Write a new inode and rename it over ``p``: never modify a file in place, so a simulated node may be
    cloned with hard links (tests do) without one clone's writes showing in another."""
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)  # a new file: no rename needed
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if mode & ~0o644:
            os.chmod(p, mode)
        return
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, p)

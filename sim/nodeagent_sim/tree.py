"""Laying out files of a simulated ``/sys``, ``/proc`` and ``/etc`` with the modes the kernel gives them.

Thousands of memory blocks carry the same few attribute values (``online``, ``Movable``, ``1``...). To keep a
hot-add of terabytes quick on slow disks, :meth:`Tree.new_dir` can make such files hard links to one shared
copy per (content, mode) in ``.nodeagent-machine/pool``. :meth:`Tree.set` and :meth:`Tree.file` never write into
a shared copy: they re-link (or unlink first), so changing one block's ``state`` changes only that block.
Anything that writes into a simulated tree must therefore go through them (or through ``SimKernel.write``).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

RO = 0o444
RW = 0o644
WO = 0o200


class Tree:
    """Writes kernel paths (``/sys/...``) under a root directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._pooled_paths: dict[tuple[str, int | None], str] = {}
        self._generation: dict[tuple[str, int | None], int] = {}  # copies that reached the link limit, per value
        #: Directories checked to be inside the root (see guard), with the identity (st_dev, st_ino) they had then:
        #: a write opens the directory again and compares, so a directory swapped for a symlink since is caught.
        self._inside: dict[str, tuple[int, int]] = {}

    def local(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def guard(self, p: Path) -> None:
        """The emulated kernel changes files of its own tree only: never through a symlink (a sysfs attribute is
        never one) nor below a directory that leads out of the root — a hostile simulated root must not make the
        simulator write this machine's files. Directories found inside are remembered (the check runs on every
        emulated write)."""
        parent = str(p.parent)
        if parent not in self._inside:
            ident = self._checked_identity(parent, str(p))
            if ident is not None:  # (a directory about to be made is checked again at its first write)
                self._inside[parent] = ident
        if p.is_symlink():
            raise OSError(errno.ELOOP, "a symlink where the kernel has an attribute", str(p))

    def _checked_identity(self, parent: str, shown: str) -> tuple[int, int] | None:
        """The identity of directory ``parent`` after checking it resolves inside the root; None: not there yet."""
        real_root = os.path.realpath(self.root)
        real = os.path.realpath(parent)
        if not (real == real_root or real.startswith(real_root + "/")):
            raise OSError(errno.EXDEV, f"{parent} leads outside the simulated root", shown)
        try:
            st = os.stat(real)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def _parent_fd(self, p: Path) -> int:
        """A descriptor of ``p``'s directory, opened now and checked now: it is the directory found inside the root
        (the identity remembered, or checked afresh) — never one a symlink swapped in since the last check."""
        parent = str(p.parent)
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if self._inside.get(parent) != (st.st_dev, st.st_ino):
                self._inside.pop(parent, None)
                if self._checked_identity(parent, str(p)) != (st.st_dev, st.st_ino):
                    raise OSError(errno.EXDEV, f"{parent} changed while it was checked", str(p))
                self._inside[parent] = (st.st_dev, st.st_ino)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def dir(self, path: str) -> Path:
        p = self.local(path)
        p.mkdir(parents=True, exist_ok=True)
        return p

    def file(self, path: str, content: str | int = "", mode: int = RW) -> None:
        p = self.local(path)
        self.guard(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        text = _text(content)
        if p.exists():
            if p.stat().st_nlink > 1:
                p.unlink()
            else:
                os.chmod(p, 0o644)
        p.write_text(text)
        os.chmod(p, mode)

    def new_dir(self, path: str, files: dict[str, tuple[str | int, int]], links: dict[str, str] | None = None,
                shared: tuple[str, ...] = ()) -> None:
        """Create the new directory ``path`` with ``{name: (content, mode)}`` files and ``{name: target}``
        symlinks. Files named in ``shared``, and the links, are hard links to pooled copies (see the module)."""
        d = str(self.local(path))
        self.guard(Path(d))
        os.makedirs(d)
        for sub in sorted({os.path.dirname(name) for name in files if "/" in name}):
            os.makedirs(f"{d}/{sub}", exist_ok=True)
        for name, (content, mode) in files.items():
            text = _text(content)
            if name in shared:
                self._link_pooled(text, mode, f"{d}/{name}")
                continue
            fd = os.open(f"{d}/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if text:
                    os.write(fd, text.encode())
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        for name, target in (links or {}).items():
            self._link_pooled(target, None, f"{d}/{name}")

    def _link_pooled(self, text: str, mode: int | None, dest: str) -> None:
        """Hard-link ``dest`` to the pool's copy; a copy that reached the filesystem's link limit (ext4: 65,000,
        fewer than the blocks of one large device) is replaced by a fresh copy for the links that follow."""
        for generation in range(1, 1 << 16):
            try:
                os.link(self._pooled(text, mode), dest, follow_symlinks=False)
                return
            except OSError as exc:
                if exc.errno != errno.EMLINK:
                    raise
                self._pooled_paths.pop((text, mode), None)
                self._generation[(text, mode)] = generation
        raise OSError(errno.EMLINK, "no pooled copy could take another link", dest)

    def _pooled(self, text: str, mode: int | None) -> str:
        """The pool's copy of a file (``mode``) or symlink (``None``) with this content, made on first use."""
        key = (text, mode)
        cached = self._pooled_paths.get(key)
        if cached is not None:
            return cached
        import hashlib  # (loaded by the writes that pool a file, not by every command on a simulated root)

        pool = self.root / ".nodeagent-machine" / "pool"
        pool.mkdir(parents=True, exist_ok=True)
        gen = self._generation.get(key, 0)
        p = pool / (f"{'l' if mode is None else f'{mode:o}'}-{hashlib.sha1(text.encode()).hexdigest()[:16]}"
                    + (f"-{gen}" if gen else ""))
        if not os.path.lexists(p):
            tmp = p.with_name(p.name + f".{os.getpid()}")
            if mode is None:
                os.symlink(text, tmp)
            else:
                tmp.write_text(text)
                os.chmod(tmp, mode)
            os.replace(tmp, p)
        self._pooled_paths[key] = str(p)
        return str(p)

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
        dfd = self._parent_fd(p)  # resolved at use: the file is reached through this descriptor only
        try:
            st = os.stat(p.name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise OSError(errno.ELOOP, "a symlink where the kernel has an attribute", str(p))
            mode = st.st_mode & 0o777
            text = _text(content)
            if st.st_nlink > 1:  # a pooled value shared by many blocks: point this one at the new value's copy
                tmp = f".{p.name}.{os.getpid()}"
                self._link_pooled(text, mode, str(p.with_name(tmp)))
                os.replace(tmp, p.name, src_dir_fd=dfd, dst_dir_fd=dfd)
                return
            fd = os.open(p.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            try:
                if not mode & 0o200:
                    os.fchmod(fd, mode | 0o200)
                wfd = os.open(p.name, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                try:
                    if os.fstat(wfd).st_ino != os.fstat(fd).st_ino:
                        raise OSError(errno.EXDEV, "the attribute changed while it was written", str(p))
                    os.write(wfd, text.encode())
                finally:
                    os.close(wfd)
                if not mode & 0o200:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
        finally:
            os.close(dfd)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(self.local(path))

    def readlink(self, path: str) -> str:
        return os.readlink(self.local(path))

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

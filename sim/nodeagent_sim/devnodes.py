"""What the driver core and devtmpfs/udev make for a device with a ``dev_t``: the ``/sys/dev/char/MAJ:MIN`` link to
the device's directory and the ``/dev`` node named by its ``DEVNAME`` (``/dev/dax0.0``, ``/dev/cxl/mem0``).

libdaxctl and libcxl (ndctl 76.1) find a device's major:minor by ``stat()`` of its ``/dev`` node
(``add_dax_dev``, ``add_cxl_memdev``) and then its subsystem through ``/sys/dev/char/MAJ:MIN/subsystem``
(``device_model_is_dax_bus``): without both a DAX device is dropped ("add_dev() failed") or read as devdax. The
node is a real character device in the simulated root's ``dev/`` (mode 0600, as udev leaves them) where the
simulator may make one (root, or CAP_MKNOD); elsewhere the root has no node, as a container without devtmpfs has
none. Nothing ever opens these nodes: the peer tools only stat them, and nodeagent refuses to read anything but a
regular file.
"""

from __future__ import annotations

import contextlib
import os
import stat

from .kernel import SimKernel


def _up(path: str) -> str:
    return "../" * (len(path.strip("/").split("/")) - 1)


def add(k: SimKernel, device: str, major: int, minor: int, devname: str) -> None:
    """Device ``device`` (its /sys/devices directory) got char dev_t ``major:minor``, named ``devname``."""
    link = f"/sys/dev/char/{major}:{minor}"
    k.tree.link(link, "../../" + device[len("/sys/"):])
    node = k.tree.local(f"/dev/{devname}")
    node.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        node.unlink()
    with contextlib.suppress(PermissionError):
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(major, minor))


def remove(k: SimKernel, major: int, minor: int, devname: str) -> None:
    """The device went away: its link and node go with it."""
    k.tree.local(f"/sys/dev/char/{major}:{minor}").unlink(missing_ok=True)
    k.tree.local(f"/dev/{devname}").unlink(missing_ok=True)


def dev_of(k: SimKernel, device: str) -> tuple[int, int] | None:
    """The ``MAJ:MIN`` of a device's ``dev`` attribute (None: it has none)."""
    if not k.tree.exists(f"{device}/dev"):
        return None
    major, minor = k.tree.read(f"{device}/dev").split(":")
    return int(major), int(minor)

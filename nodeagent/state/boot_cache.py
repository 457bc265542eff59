"""Answers of probes that only a reboot changes (is this a VM, how much memory the GPUs have), kept per boot.

A probe that runs a command (``systemd-detect-virt``, ``nvidia-smi``) costs a process start every time; a
converged apply or a ``check`` from a timer should not pay it again and again. :func:`probe` keeps a probe's
answer in ``/var/lib/nodeagent/probes.json`` (:class:`nodeagent.state.Probes`) under the root together with
the boot id it was made in (``/proc/sys/kernel/random/boot_id``, new at every boot); an answer from another
boot is never used. A root without a boot id caches nothing. Failures are not kept (a timed-out ``nvidia-smi``
is asked again).

Only a run that holds the state lock writes the file (``apply``: :meth:`nodeagent.state.StateStore.locked`
sets :data:`PERSIST`); read-only commands (``check``, ``plan``, ``facts``) read it and never write to the node.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..host import Host

BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: True while the state lock is held: a probe that had to run may then be written down.
PERSIST: ContextVar[bool] = ContextVar("probe_cache_persist", default=False)


def probe(host: Host, key: str, run: Callable[[], str]) -> str:
    """``run()``'s answer for ``key``, from this boot's cache when it is there. Exceptions of ``run`` pass."""
    from . import Probes, StateStore  # the record lives with the others

    boot = (host.read_opt(BOOT_ID) or "").strip()
    if not boot:
        return run()
    store = StateStore(host)
    cached = store.read(Probes)
    probes = cached.probes if cached.boot_id == boot else {}
    if key in probes:
        return probes[key]
    value = run()
    if PERSIST.get():
        store.write_record(Probes(boot, {**probes, key: value}))
    return value


def attach(host: Host) -> None:
    """Answer ``host``'s probes from this boot's cache (:meth:`nodeagent.host.Host.cached_probe`): the state
    owns the cache, so the host and the facts that probe never import the state."""
    host.probe_cache = partial(probe, host)

"""Answers of probes that only a reboot changes (is this a VM, how much memory the GPUs have), kept per boot.

A probe that runs a command (``systemd-detect-virt``, ``nvidia-smi``) costs a process start every time; a
converged apply or a ``check`` from a timer should not pay it again and again. :func:`probe` keeps a probe's
answer in ``/var/lib/nodeagent/probes.json`` (:class:`Probes`) under the root together with
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
from typing import TYPE_CHECKING, Any, Protocol

from .records import FORMAT, Record, _version
from .shape import _obj, _str

if TYPE_CHECKING:
    from ..host import Host

BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: True while the state lock is held: a probe that had to run may then be written down.
PERSIST: ContextVar[bool] = ContextVar("probe_cache_persist", default=False)


class Probes(Record):
    """Probe answers of one boot (``boot_id``)."""

    __slots__ = ("boot_id", "probes")
    FILE = "probes.json"
    HOLDS = "this boot's probe answers"

    def __init__(self, boot_id: str | None = None, probes: dict[str, str] | None = None) -> None:
        self.boot_id = boot_id
        self.probes = probes or {}

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "boot_id": self.boot_id, "probes": dict(sorted(self.probes.items()))}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Probes:
        _version(data, cls.FILE)
        probes = _obj(data.get("probes"), "probes", {})
        return cls(_str(data.get("boot_id"), "boot_id"),
                   {str(k): v for k, v in probes.items() if isinstance(v, str)})


class Store(Protocol):
    """What the cache asks of the store (:class:`nodeagent.state.store.StateStore`, which imports this module)."""

    def read(self, kind: type[Probes]) -> Probes: ...

    def write_record(self, record: Record) -> None: ...


def probe(host: Host, store_of: Callable[[Host], Store], key: str, run: Callable[[], str]) -> str:
    """``run()``'s answer for ``key``, from this boot's cache (read and written through a store of ``host`` that
    ``store_of`` opens) when it is there. Exceptions of ``run`` pass."""
    boot = (host.read_opt(BOOT_ID) or "").strip()
    if not boot:
        return run()
    store = store_of(host)
    cached = store.read(Probes)
    probes = cached.probes if cached.boot_id == boot else {}
    if key in probes:
        return probes[key]
    value = run()
    if PERSIST.get():
        store.write_record(Probes(boot, {**probes, key: value}))
    return value


def attach(host: Host, store_of: Callable[[Host], Store]) -> None:
    """Answer ``host``'s probes from this boot's cache (:meth:`nodeagent.host.Host.cached_probe`): the state
    owns the cache, so the host and the facts that probe never import the state. The store that attaches it
    passes its own class (``store_of``), so that this module needs no import of the store."""
    host.probe_cache = partial(probe, host, store_of)

"""The state directory, ``/var/lib/nodeagent`` under the root (:data:`STATE_DIR`): :class:`StateStore` reads
each file into its typed record and writes records back, holds the lock, keeps room for a run's records and sets
bad files aside (the rules: :mod:`nodeagent.state`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from ..util import jsonin
from ..util.timestamps import rfc3339
from .advisories import AdvisoriesShown
from .boot_cache import PERSIST, Probes, attach
from .drift_record import DriftRecord
from .last_applied import LastApplied
from .last_checks import LastChecks
from .originals import Original, Originals
from .ownership import Ownership
from .plan_state import PlanState
from .progress import Progress
from .records import R, Record
from .shape import ShapeError, _type

if TYPE_CHECKING:
    from ..host import Host

STATE_DIR = "/var/lib/nodeagent"
JOURNAL = f"{STATE_DIR}/journal.jsonl"
RECORDS: tuple[type[Record], ...] = (LastApplied, Originals, Ownership, DriftRecord, LastChecks, Probes, Progress,
                                     AdvisoriesShown)
#: Where a run holds room for its records (:meth:`StateStore.reserve`).
RESERVE = ".reserve"
#: The state directory's files besides the records: the lock, the journal and its rotations, the reserve.
OWN_FILES = ("lock", "journal.jsonl", "journal.jsonl.1", "journal.jsonl.2", RESERVE)
#: Beyond the records' own size: the journal's event, ownership records of what gets built, filesystem overhead.
SLACK = 64 * 1024


class StateStore:
    def __init__(self, host: Host) -> None:
        attach(host, type(self))  # the probes' per-boot cache is a state file: the state answers the host's probes
        self.host = host
        self.warnings: list[str] = []
        self.writable = False  # set while a writing command holds the lock: only then is a bad file moved
        self.set_aside: dict[str, str] = {}  # file → what became of it, this run (revert names lost originals)

    def path(self, name: str) -> str:
        return f"{STATE_DIR}/{name}"

    @contextmanager
    def locked(self, timeout: float = 60.0) -> Iterator[None]:
        from ..util.errors import HostError, NoSpaceError

        with ExitStack() as stack:
            try:
                stack.enter_context(self.host.fs.lock(self.path("lock"), timeout))
            except HostError as exc:  # the state directory cannot even hold the lock: nothing has been done
                hint = f"free space on the filesystem that holds {STATE_DIR} (df {STATE_DIR}), then run again" \
                    if isinstance(exc, NoSpaceError) else \
                    f"make {STATE_DIR} writable (a read-only filesystem? a full disk?), then run again"
                raise type(exc)(f"cannot take the state lock: {exc.message}; nothing was written", path=STATE_DIR,
                                hint=exc.hint or hint) from None
            try:  # every file of its own a writing run may write in place or set aside: checked before any work
                for name in (*OWN_FILES, *(r.FILE for r in RECORDS)):
                    self.host.fs.require_own(self.path(name))
            except HostError as exc:
                raise type(exc)(f"cannot use the state directory: {exc.message}; nothing was written", path=exc.path,
                                hint=exc.hint) from None
            self.writable = True
            token = PERSIST.set(True)  # probes run while the lock is held are kept for this boot
            try:
                yield
            finally:
                PERSIST.reset(token)
                self.writable = False

    # -- reading and writing records ---------------------------------------------------------------------
    def read(self, kind: type[R]) -> R:
        """The record in ``kind.FILE``, validated (and migrated from the previous format); empty when there is
        none, or when the file is unreadable (see the module docs)."""
        raw = self.host.fs.read_own_opt(self.path(kind.FILE))  # a hard link to another file is refused
        if raw is None or not raw.strip():
            return kind()
        try:
            data = jsonin.loads(raw)
            if not isinstance(data, dict):
                raise ShapeError(f"expected a JSON object, got {_type(data)}")
            return kind.from_json(data)
        except ShapeError as exc:  # records of the wrong shape: the good ones are kept, the bad ones set aside
            kept, lost = _salvage(kind, data) if isinstance(data, dict) else (None, [])
            self._bad(kind, raw, str(exc), kept, lost)
            return kept if kept is not None else kind()
        except ValueError as exc:  # json.JSONDecodeError
            self._bad(kind, raw, str(exc))
            return kind()

    def write_record(self, record: Record) -> None:
        """Write ``record`` to its file: atomically (temp file, fsync, rename, fsync of the directory), in the
        current format. On a full filesystem the room a run holds for its records (:meth:`reserve`) is given
        back and the write tried once more."""
        from ..util.errors import NoSpaceError

        text = json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n"
        try:
            self.host.fs.write_file_atomic(self.path(record.FILE), text)
        except NoSpaceError:
            if not self.release():
                raise
            self.host.fs.write_file_atomic(self.path(record.FILE), text)

    # -- crash safety: room for the records, runs that did not finish ------------------------------------------
    def reserve(self, records: list[Any]) -> int:
        """Hold room (``posix_fallocate``, in :data:`RESERVE`) for writing ``records`` — each replaced atomically,
        old and new side by side — before a run's first change: a state directory that is full or read-only
        refuses then (:class:`HostError`), nothing changed. Returns the bytes held."""
        from ..util.errors import HostError

        need = sum(2 * len(json.dumps(r.to_json() if isinstance(r, Record) else r, indent=2, sort_keys=True,
                                      default=str)) for r in records) + SLACK
        try:
            self.host.fs.reserve(self.path(RESERVE), need)
        except HostError:
            self.release()
            raise
        return need

    def release(self) -> bool:
        """Give back the room :meth:`reserve` held (False: none was held, or it could not be removed)."""
        from ..util.errors import HostError

        try:
            return self.host.fs.remove(self.path(RESERVE))
        except HostError:
            return False

    def unfinished(self) -> Progress:
        """The progress record a run left without finishing (killed, or unable to write its result); empty when
        every run finished."""
        return self.read(Progress)

    def end_run(self) -> None:
        """The run recorded its result: its progress record goes."""
        self.host.fs.remove(self.path(Progress.FILE))

    @contextmanager
    def edit(self, kind: type[R]) -> Iterator[R]:
        """Read ``kind``'s record, let the caller change it, write it back if it changed."""
        record = self.read(kind)
        before = record.to_json()
        yield record
        if record.to_json() != before:
            self.write_record(record)

    def _bad(self, kind: type[Record], raw: str, why: str, kept: Record | None = None,
             bad: list[str] | None = None) -> None:
        """Set a bad file aside (when a writing command holds the lock) and say what was lost with it: the bad
        records, when the rest could be ``kept`` (and is written back), else everything it held."""
        from ..util.errors import HostError

        name = kind.FILE
        lost = f"{', '.join(bad)} (the rest is kept)" if kept is not None and bad else _held(kind, raw)
        self.set_aside[name] = f"{self.path(name)}, which is corrupt ({why})"
        if not self.writable:
            self._warn(f"state file {self.path(name)} is corrupt ({why}); ignored here ({lost} with it), set aside "
                       "by the next apply")
            return
        aside = f"{name}.corrupt-{rfc3339().replace(':', '')}"
        try:
            # Set aside by rename: the file itself moves (its mode, its owner, one link), nothing is copied.
            self.host.fs.rename(self.path(name), self.path(aside))
            if kept is not None:
                self.write_record(kept)
            else:
                self.host.fs.write_file_atomic(self.path(name), "{}\n")
        except HostError as exc:
            self._warn(f"state file {self.path(name)} is corrupt ({why}); ignored ({lost} with it), and it could "
                       f"not be set aside: {exc.message}")
            return
        self.set_aside[name] = f"{self.path(name)}, which was corrupt ({why}; set aside as {self.path(aside)})"
        self._warn(f"state file {self.path(name)} was corrupt ({why}); set aside as {self.path(aside)}; lost: "
                   f"{lost}")

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    # -- the records by name -------------------------------------------------------------------------------
    def last_applied(self) -> LastApplied:
        return self.read(LastApplied)

    def originals(self) -> Originals:
        return self.read(Originals)

    def ownership(self) -> Ownership:
        return self.read(Ownership)

    def drift(self) -> DriftRecord:
        return self.read(DriftRecord)

    def last_checks(self) -> LastChecks:
        return self.read(LastChecks)

    def advisories_shown(self) -> AdvisoriesShown:
        return self.read(AdvisoriesShown)

    def remember_advisories(self, profile: str, digest: str, kernel: str, texts: list[str]) -> bool:
        """Record ``texts`` as shown in full for this profile on this kernel (the caller holds the lock); False when
        every one already was (nothing written)."""
        with self.edit(AdvisoriesShown) as shown:
            return shown.add(profile, digest, kernel, texts)

    def remember_originals(self, items: dict[str, Original]) -> None:
        """Record ``{target: Original}`` for targets not yet recorded (the first record of a target wins)."""
        with self.edit(Originals) as originals:
            now = rfc3339()
            for target, rec in items.items():
                if target not in originals.items:
                    originals.items[target] = rec._replace(recorded=rec.recorded or now)

    def record_apply(self, record: LastApplied) -> None:
        """Write the last-applied record, stamped now."""
        record.time = rfc3339()
        self.write_record(record)

    def plan_state(self) -> PlanState:
        """Every record planning reads (so that a bad one is found before planning, not halfway through an
        apply)."""
        return PlanState(self.last_applied(), self.originals(), self.ownership())

    def load_all(self) -> dict[str, dict[str, Any]]:
        """:meth:`plan_state` as JSON (a facts document's ``state``)."""
        return self.plan_state().to_json()


def _salvage(kind: type[R], data: dict[str, Any]) -> tuple[R | None, list[str]]:
    """The records of ``data`` that have the right shape, and the names of those that do not (``damon.kdamonds.9``);
    ``(None, [])`` when the file is wrong beyond its records (or keeps none by key: :attr:`Record.KEYED`)."""
    paths = kind.KEYED
    if not paths:
        return None, []
    data = kind.in_current_layout(data)
    try:
        base = json.loads(json.dumps(data))
    except RecursionError:  # nested just short of what the parser refuses: too deep to tell records apart
        return None, []
    for path in paths:
        _put(base, path, {})
    try:
        kind.from_json(base)
    except ShapeError:
        return None, []
    lost: list[str] = []
    for path in paths:
        mapping = _get(data, path)
        if mapping is None:
            continue
        if not isinstance(mapping, dict):
            lost.append(f"{'.'.join(path)} (not an object)")
            continue
        for key, rec in mapping.items():
            _get(base, path)[key] = rec
            try:
                kind.from_json(base)
            except ShapeError:
                del _get(base, path)[key]
                lost.append(".".join((*path, str(key))))
    return kind.from_json(base), lost


def _get(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for p in path:
        if not isinstance(data, dict):
            return None
        data = data.get(p)  # type: ignore[assignment]
    return data


def _put(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for p in path[:-1]:
        if not isinstance(data.get(p), dict):
            data[p] = {}
        data = data[p]
    data[path[-1]] = value


def _held(kind: type[Record], raw: str) -> str:
    """What a bad file held, as far as it can be read: its records by name where it parses at all."""
    what = kind.HOLDS
    try:
        data = jsonin.loads(raw)
    except ValueError:
        return f"every record in it ({what}...)"
    if not isinstance(data, dict):
        return f"every record in it ({what}...)"
    keys = kind.held(data)
    if keys is None:
        return what
    shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
    return f"{what} {shown}" if keys else f"{what} nothing"


def cache_probes(host: Host) -> None:
    """Answer ``host``'s probes from this boot's cache (:mod:`nodeagent.state.boot_cache`), as a store opened on it
    does: for a command that reads the probe answers without opening the store."""
    attach(host, StateStore)

"""What nodeagent remembers about a node, under ``<root>/var/lib/nodeagent``: the one package that reads and
writes those files. Every other module asks it for a typed record and hands it a record to write. Each file's
record has a module of its own here, named after it; :mod:`.store` reads and writes them all, on the checks of
:mod:`.shape` and the base of :mod:`.records`.

- ``lock``: one run at a time (flock; a second run waits up to a bound, then names the holder's pid);
- ``last-applied.json`` (:class:`LastApplied`): profile name, path and digest, the merged document (``desired``)
  and the validated profile in its versioned plain form (``resolved``, :mod:`nodeagent.profile.resolved`: drift uses it
  without YAML or pydantic), result, time, and what ``revert`` put back since (``reverted``);
- ``originals.json`` (:class:`Originals`): each setting's value before nodeagent first managed it (for
  ``revert``);
- ``ownership.json`` (:class:`Ownership`): what nodeagent created or changed (kdamonds, DAX devices, CXL
  regions), so it never touches what it did not;
- ``drift.json`` (:class:`DriftRecord`): the open drift items and, apart, what cannot be done (``drift
  --record``);
- ``last-checks.json`` (:class:`LastChecks`): the last preflight check results (for the metrics and labels);
- ``advisories.json`` (:class:`~nodeagent.state.advisories.AdvisoriesShown`): which advisories were shown in
  full, per profile and kernel release (so that they are said once, then counted);
- ``probes.json`` (:class:`Probes`): answers of commands only a reboot changes, for this boot
  (:mod:`nodeagent.state.boot_cache`);
- ``journal.jsonl``: the history journal (:mod:`nodeagent.state.journal`, at :data:`JOURNAL`);
- ``progress.json`` (:class:`Progress`) and ``.reserve``: while an apply runs, what it is doing (each change
  before its first write, each outcome after) and room held for its records (:meth:`StateStore.reserve`).

Every file carries its ``format`` (:data:`FORMAT`) and every time in it is RFC 3339 UTC
(:mod:`nodeagent.util.timestamps`). A record is validated when it is read (:meth:`StateStore.read`): a file of the
previous format (no ``format`` key) is migrated on read and written in the new one by the next write; a file
that is not JSON, of the wrong shape, or of a newer format is reported in :attr:`StateStore.warnings` (naming the
file and the field) and read as empty — set aside as ``<name>.corrupt-<time>`` when a writing command holds the
lock (renamed: the file itself moves, nothing is copied), with what was lost in it, never a crash and never
silently reset. A state file with more than one hard link is refused, read or written: it is another file's too.
Every write goes through :meth:`StateStore.write_record` (atomic: temp file, fsync, rename, fsync of the
directory; on ENOSPC the room an apply holds is given back and the write tried again).
"""

from .advisories import AdvisoriesShown
from .boot_cache import Probes
from .drift_record import DriftEntry, DriftRecord, Unfixable
from .last_applied import LastApplied, Reverted, resolved_record
from .last_checks import CheckOutcome, LastChecks
from .originals import Original, Originals
from .ownership import OwnedDevice, OwnedKdamond, OwnedRegion, Ownership
from .plan_state import PlanState
from .progress import Progress
from .records import FORMAT, Record
from .shape import ShapeError
from .store import JOURNAL, OWN_FILES, RECORDS, RESERVE, SLACK, STATE_DIR, StateStore

__all__ = [
    "FORMAT", "JOURNAL", "OWN_FILES", "RECORDS", "RESERVE", "SLACK", "STATE_DIR", "AdvisoriesShown", "CheckOutcome",
    "DriftEntry", "DriftRecord", "LastApplied", "LastChecks", "Original", "Originals", "OwnedDevice", "OwnedKdamond",
    "OwnedRegion", "Ownership", "PlanState", "Probes", "Progress", "Record", "Reverted", "ShapeError", "StateStore",
    "Unfixable", "resolved_record",
]

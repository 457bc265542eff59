"""What follows an apply, whoever ran it: the CLI's ``apply``, the DaemonSet's ``run --apply`` and the Ansible
module all call :func:`after_apply`, so a node converged by any of them has the same NFD labels and metrics.

The hooks run in :data:`HOOKS`' order after an apply that was not a dry run:

1. the metrics textfile, where the caller names one (``--metrics-textfile``, the module's ``metrics_textfile``):
   a textfile that cannot be written is the run's failure (named), but the apply's result stands and the
   other hooks still run;
2. NFD's feature file (:mod:`nodeagent.k8s.labels`), where its ``features.d`` directory exists (or always /
   never, as the caller says): a failure is a note, never a failed apply.

Each hook returns a note to show (or None) or raises the :class:`~nodeagent.util.errors.NodeagentError` that
makes the run fail; :func:`after_apply` runs them all and returns the notes and the first failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..util.errors import NodeagentError

if TYPE_CHECKING:
    from ..profile import LoadedProfile
    from .core import Engine


@dataclass(frozen=True)
class AfterApply:
    """How one caller wants the hooks run."""

    #: Write the metrics textfile here (an operator's path, not under --root); None: no textfile.
    metrics_textfile: str | None = None
    #: NFD labels: ``auto`` (where the features.d directory exists), ``always`` or ``never``.
    labels: str = "auto"
    label_prefix: str | None = None
    #: The feature file's ``+expiry-time`` (the DaemonSet's labels vanish when its pod dies).
    label_expires: datetime | None = None
    label_source: str | None = None


def _metrics(engine: Engine, loaded: LoadedProfile, result: Any, opts: AfterApply) -> str | None:
    if opts.metrics_textfile:
        from ..metrics.node_textfile import write_metrics

        write_metrics(engine, opts.metrics_textfile, loaded=loaded,
                      checks=result.checks.results if result.checks is not None else None)
    return None


def _labels(engine: Engine, loaded: LoadedProfile, result: Any, opts: AfterApply) -> str | None:
    from ..k8s import labels

    return labels.after_apply(engine, loaded, result, mode=opts.labels, prefix=opts.label_prefix,
                              expires=opts.label_expires, source=opts.label_source)


#: The post-apply hooks, in order.
HOOKS: tuple[Callable[[Engine, LoadedProfile, Any, AfterApply], str | None], ...] = (_metrics, _labels)


@dataclass(frozen=True)
class AfterApplyDone:
    notes: tuple[str, ...] = ()
    #: The first hook that failed (the caller exits with it after reporting the apply); None: all did their job.
    failed: NodeagentError | None = None


def after_apply(engine: Engine, loaded: LoadedProfile, result: Any, opts: AfterApply | None = None
                ) -> AfterApplyDone:
    """Run :data:`HOOKS` after ``result`` (nothing after a dry run): every hook runs, whatever an earlier one did."""
    if result.dry_run:
        return AfterApplyDone()
    opts = opts or AfterApply()
    notes: list[str] = []
    failed: NodeagentError | None = None
    for hook in HOOKS:
        try:
            note = hook(engine, loaded, result, opts)
        except NodeagentError as exc:
            failed = failed or exc
            continue
        if note:
            notes.append(note)
    return AfterApplyDone(tuple(notes), failed)

"""``nodeagent check PROFILE --facts FILE|DIR``: the preflight checks judged from saved facts, per node."""

from __future__ import annotations

from typing import Any

import click

from ..profile import LoadedProfile
from ..util.errors import ExitCode, UsageError


def check_offline(ctx: Any, loaded: LoadedProfile, facts_path: str, skips: frozenset[str] = frozenset()) -> None:
    from ..checks.offline import run_offline, to_dict
    from ..facts import snapshot
    from ..render.checks import offline_text

    if ctx.simulate or ctx.root != "/":
        raise UsageError("--facts checks saved facts offline: --root and --simulate do not apply",
                         hint="drop --root/--simulate, or drop --facts to check that node")
    pairs = [(snap, run_offline(loaded, snap, skips)) for snap in snapshot.read_all(facts_path)]
    ctx.emit(offline_text(pairs), to_dict(pairs))
    failed = sorted({r.name for _, rep in pairs for r in rep.failed})
    if failed:
        click.echo(f"nodeagent: error-severity checks failed on saved facts: {', '.join(failed)}", err=True)
        raise click.exceptions.Exit(ExitCode.CHECK_FAILED)

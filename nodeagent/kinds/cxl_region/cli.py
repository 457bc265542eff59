"""``apply --wait-memdevs DURATION``: the boot unit's wait for the memdevs of the profile's regions."""

from __future__ import annotations

from typing import Any

import click

from ...util.errors import UsageError
from ...util.escape import escape_controls
from ...util.quantities import parse_duration_us


def wait_memdevs_option(engine: Any, loaded: Any, text: str) -> None:
    from .wait import wait_for_memdevs

    try:
        timeout = parse_duration_us(text.strip() if text.strip()[-1:].isalpha() else text.strip() + "s") / 1e6
    except (ValueError, IndexError):
        raise UsageError(f"--wait-memdevs {text!r}: not a duration", hint="e.g. --wait-memdevs 60s") from None
    missing, waited = wait_for_memdevs(engine.host, loaded, engine.state.ownership(), timeout)
    if missing:
        click.echo(escape_controls(f"nodeagent: after {waited:.0f}s the CXL memdevs with serial "
                                   f"{', '.join(f'{s:#x}' for s in sorted(missing))} are still not there: their "
                                   "regions are not made (see the plan's problems)"), err=True)

"""Fixtures of the real-kernel tier: a QEMU (TCG) guest running Debian's 6.12 kernel.

Tests that use ``guest`` are SKIPPED, with the reason printed at the end of the run, when
QEMU or the guest assets cannot be had.  Set NODEAGENT_REALKERNEL=0 to skip them on purpose.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import harness  # noqa: E402

_SKIP_REASONS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "realkernel: boots Debian's 6.12 kernel under QEMU/TCG (needs qemu-system-x86 and the Debian "
        "mirror or a warm cache; skipped with a printed reason otherwise)",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for reason in _SKIP_REASONS:
        terminalreporter.write_line(f"realkernel tier SKIPPED: {reason}", yellow=True, bold=True)


def _skip(reason: str) -> None:
    if reason not in _SKIP_REASONS:
        _SKIP_REASONS.append(reason)
    pytest.skip(f"realkernel: {reason}")


@pytest.fixture(scope="session")
def guest() -> harness.Guest:
    """run_in_guest bound to the fetched assets: ``guest.run(cmd)``, ``guest.run_steps(steps)``."""
    if os.environ.get("NODEAGENT_REALKERNEL", "1") == "0":
        _skip("disabled by NODEAGENT_REALKERNEL=0")
    if harness.qemu_binary() is None:
        _skip("qemu-system-x86_64 not found (apt-get install qemu-system-x86)")
    try:
        assets = harness.ensure_assets()
    except harness.HarnessUnavailable as exc:
        _skip(f"guest assets unavailable: {exc}")
    return harness.Guest(assets)


@pytest.fixture(scope="module")
def cxl_guest(guest: harness.Guest) -> harness.Guest:
    """The guest, for the ``cxl`` layout: it needs QEMU >= 8 and the project's virtualenv."""
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    try:
        harness.ensure_qemu(harness.LAYOUTS["cxl"].qemu_min, guest.assets.cache_dir)
    except harness.HarnessUnavailable as exc:
        _skip(f"the CXL scenario needs QEMU >= 8 (cxl-type3 volatile-memdev=): {exc}")
    return guest

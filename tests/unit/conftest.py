"""Fixtures of the unit tests."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def alarm() -> Iterator[None]:
    """A read that blocks (a FIFO, a device) fails the test instead of hanging the suite."""
    def boom(*_: object) -> None:
        raise TimeoutError("an input made nodeagent block")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)

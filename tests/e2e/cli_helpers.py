"""What the end-to-end tests share: running the CLI in-process and reading back what it printed."""

from __future__ import annotations

import pytest

from nodeagent.cli.main import main


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``nodeagent ARGS`` in this process: (exit code, stdout, stderr)."""
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err

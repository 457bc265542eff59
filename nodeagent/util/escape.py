"""Text for a terminal: what is read from the node is shown, never acted on (no imports: the CLI loads it on
every command)."""

from __future__ import annotations

#: Characters a terminal acts on instead of showing: C0 controls but newline and tab (ESC starts the OSC and CSI
#: sequences that retitle a window, rewrite the screen or smuggle a hyperlink; CR overwrites a line), DEL, the C1
#: controls (0x9b is a one-byte CSI on some terminals) and the bidirectional overrides that reorder what is read.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0))} | \
    {c: f"\\u{c:04x}" for c in (*range(0x202a, 0x202f), *range(0x2066, 0x206a))}


def escape_controls(text: str) -> str:
    """``text`` safe for a terminal: every character a terminal would act on is shown as its escape
    (``\\x1b``), the way ``ls`` and ``systemctl`` show them; newlines and tabs stay. Everything read from the
    node goes through this before it reaches text output."""
    return text.translate(_CONTROLS)

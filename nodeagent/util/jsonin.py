"""JSON from outside nodeagent's code — state files, journal lines, facts files, a command's stdout — parsed so that
any malformed document, nesting too deep for the parser included, is one ``ValueError``.

``json.loads`` recurses once per level of nesting: ``[`` repeated 100,000 times raises ``RecursionError``, which
is no ``ValueError``, so every ``except ValueError`` that meant "not JSON" let it through as an internal error.
"""

from __future__ import annotations

import json
from typing import Any


class TooDeepError(ValueError):
    """A JSON document nested deeper than Python's parser goes."""


def loads(text: str | bytes) -> Any:
    """:func:`json.loads`; a document nested too deeply is a :class:`TooDeepError` (a ``ValueError``)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeepError("nested too deeply: more levels of [ and { than any document nodeagent reads has") \
            from None

"""Profiles: load (YAML + extends, with positions) → validate (pydantic) → :class:`LoadedProfile`.

Every validation error is one line ``file:line:column: field.path: what was expected, got what``. Loading and
the model live in :mod:`.loaded` and :mod:`.model`; they are imported on first use of the names below, so the
light parts of this package — the validated-profile cache (:mod:`.cache`), the plain resolved profile
(:mod:`.resolved`) and where a node's profile lives (:mod:`.locate`) — never load YAML or pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["LoadedProfile", "load_profile", "load_profile_text", "NodeProfile", "schema"]

if TYPE_CHECKING:
    from .loaded import LoadedProfile, NodeProfile, load_profile, load_profile_text, schema


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import loaded

        return getattr(loaded, name)
    raise AttributeError(name)

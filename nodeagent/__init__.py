"""nodeagent: a declarative, idempotent configurator for Linux tiered-memory nodes.

The public API is small: load a profile, open a host, and let the engine plan and apply::

    from nodeagent import Engine, load_profile, open_host
    engine = Engine(open_host("/"))
    result = engine.apply(load_profile("profiles/cxl-inference.yaml"))

Heavy modules are imported on first use, so ``import nodeagent`` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Engine", "ExitCode", "NodeagentError", "load_profile", "make_plan", "open_host", "gather"]

if TYPE_CHECKING:
    from .engine.core import Engine, make_plan
    from .facts import gather
    from .host import open_host
    from .profile import load_profile
    from .util.errors import ExitCode, NodeagentError

_LAZY = {"Engine": "engine.core", "make_plan": "engine.core", "ExitCode": "util.errors",
         "NodeagentError": "util.errors", "gather": "facts", "open_host": "host", "load_profile": "profile"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)

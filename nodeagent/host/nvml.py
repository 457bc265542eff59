"""NVIDIA's management library (NVML) for the node under the root, through nvidia-ml-py's ``pynvml`` API.

On the real root (``/``) it is nvidia-ml-py's module, when that optional dependency is installed
(``pip install nodeagent[nvidia]``); whether the driver's library loads is only known at ``nvmlInit()``. On a
simulated root it is the machine plugin's provider (:mod:`nodeagent.host.machine`), which answers from the preset's
GPUs — never this machine's driver. On any other root there is none: this machine's GPUs are not the node's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import Host


def open_nvml(host: Host) -> Any | None:
    """A pynvml-shaped provider for ``host``, or None when there is none to ask."""
    if host.simulated:
        from .machine import plugin

        return plugin().nvml(host.root)
    if not host.is_real:
        return None
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None

"""systemd units and the udev rule that keep a node converged: rendered from jinja2 templates
(``nodeagent/render/unit_templates``, also reachable as ``units/`` at the top of the repository).

=============================  ===========================================================================
``nodeagent-apply.service``    oneshot at boot, ordered before the inference service (``--before``)
``nodeagent-apply@.service``   one hot-plugged device: ``apply --device %i`` (started by the udev rule)
``nodeagent-drift.service``    ``drift --record`` (+ metrics), exit 3 counted as success
``nodeagent-drift.timer``      runs it every ``--interval`` (default 5min)
``90-nodeagent.rules``         ``add`` of dax/cxl/memory devices → ``SYSTEMD_WANTS`` the instance above
``nodeagent-exporter.service`` ``metrics serve --listen :10075``: the Prometheus exporter (enable it if wanted)
``nodeagent-guard.service``    ``guard``: pauses ``dest_free`` schemes while their destination is full (idles
                               where the profile has none)
=============================  ===========================================================================

Nothing waits for the deprecated ``systemd-udev-settle.service``: devices present at boot are handled by the
boot apply after ``systemd-udev-trigger.service``, and every later one by its own instance.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from ..util.errors import UsageError

TEMPLATES = ("nodeagent-apply.service", "nodeagent-apply@.service", "nodeagent-drift.service",
             "nodeagent-drift.timer", "90-nodeagent.rules", "nodeagent-exporter.service", "nodeagent-guard.service")
UNIT_DIR = "/etc/systemd/system"
RULES_DIR = "/etc/udev/rules.d"
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]+\.(service|target|socket|mount|timer|path|slice|scope)")
_INTERVAL = re.compile(r"(\d+\s*(us|ms|s|sec|m|min|h|hr|d|w)\s*)+")


def destination(name: str) -> str:
    """Where ``units install`` puts a rendered file (a kernel-style absolute path under the root)."""
    return f"{RULES_DIR}/{name}" if name.endswith(".rules") else f"{UNIT_DIR}/{name}"


def _path(what: str, value: str) -> str:
    if not value.startswith("/"):
        raise UsageError(f"{what} {value!r}: must be an absolute path (units do not run in your directory)")
    if re.search(r"[\s\"'\\;$%]", value):
        raise UsageError(f"{what} {value!r}: contains a space, quote, '$', '%' or ';', which unit files would "
                         "misread", hint="use a path without them")
    return value


def render_units(profile: str, *, prefix: str | None = None, exe: str | None = None, before: str | None = None,
                 metrics: str | None = None, interval: str = "5min",
                 profile_name: str | None = None) -> dict[str, str]:
    """``{file name: text}`` of every unit and the udev rule, for ``profile`` (an absolute path on the node),
    run by ``exe`` (default ``prefix/bin/nodeagent``)."""
    import jinja2

    if before is not None and "." not in before:
        before += ".service"
    if before is not None and not _UNIT_NAME.fullmatch(before):
        raise UsageError(f"--before {before!r}: not a systemd unit name", hint="e.g. --before vllm.service")
    if not _INTERVAL.fullmatch(interval.strip()):
        raise UsageError(f"--interval {interval!r}: expected a systemd time span such as 5min, 30s or 1h")
    params = {
        "profile": _path("PROFILE", profile),
        "profile_name": profile_name or Path(profile).stem,
        "exe": _path("--exe", exe) if exe is not None else _path("--prefix", str(Path(prefix or "/usr") / "bin" /
                                                                              "nodeagent")),
        "before": before,
        "metrics": _path("--metrics-textfile", metrics) if metrics else None,
        "interval": interval.strip(),
    }
    env = jinja2.Environment(autoescape=False, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    base = resources.files("nodeagent.render").joinpath("unit_templates")
    return {name: env.from_string(base.joinpath(f"{name}.j2").read_text(encoding="utf-8")).render(**params)
            for name in TEMPLATES}

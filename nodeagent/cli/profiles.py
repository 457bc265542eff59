"""``nodeagent profiles list|show``: the profiles installed with nodeagent (as ``tuned-adm list`` and
``tuned-adm profile_info``). A shipped profile's name works wherever a PROFILE is given, and in ``extends``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..util.errors import NodeagentError, UsageError
from .main import Ctx


def register(cli: click.Group) -> None:
    cli.add_command(profiles)


def _text(path: Path) -> str:
    """A shipped profile's text, through the bounded reader (the profiles directory may be an operator's)."""
    from ..host.files import InputFileError, read_regular
    from ..profile.load import MAX_BYTES

    try:
        return read_regular(path, MAX_BYTES).decode("utf-8", errors="replace")
    except InputFileError as exc:
        raise UsageError(f"{path}: {exc}", hint=exc.hint) from None


def _about(path: Path) -> dict[str, Any]:
    """A shipped profile's name, description and what it extends, as written in its file (not merged)."""
    import yaml

    doc = yaml.safe_load(_text(path))
    doc = doc if isinstance(doc, dict) else {}
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    ext = doc.get("extends") or []
    return {"name": path.name.removesuffix(".yaml"), "description": meta.get("description") or "",
            "extends": [str(e).removesuffix(".yaml") for e in (ext if isinstance(ext, list) else [ext])],
            "path": str(path)}


def _applied(ctx: Ctx) -> dict[str, Any] | None:
    """The profile last applied to this node (name, file, when), where the state can be read."""
    try:
        last = ctx.engine().state.last_applied()
    except (OSError, NodeagentError):
        return None
    if not last or last.status == "reverted":
        return None
    return {"name": last.profile, "path": last.profile_path, "time": last.time, "status": last.status}


def _find(name: str) -> Path:
    from ..profile import shipped

    path = shipped.find(name)
    if path is None:
        import difflib

        known = shipped.names()
        close = difflib.get_close_matches(name, known, n=1)
        raise UsageError(f"no shipped profile named {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                         hint=f"`nodeagent profiles list` lists them: {', '.join(known) or 'none installed'}")
    return path


@click.group()
def profiles() -> None:
    """The profiles that ship with nodeagent. Their names work wherever a PROFILE is given
    (`nodeagent plan cxl-inference`) and in a profile's extends (`extends: [cxl-inference]`).

    \b
    Examples:
      nodeagent profiles list
      nodeagent profiles show cxl-inference
      nodeagent profiles show cxl-inference > /etc/nodeagent/profile.yaml   # then edit it
    """


@profiles.command(name="list")
@click.pass_obj
def list_(ctx: Ctx) -> None:
    """List the shipped profiles, and the one last applied to this node."""
    from .. import __version__
    from ..profile import shipped

    found = [_about(shipped.directory() / f"{n}.yaml") for n in shipped.names()]
    applied = _applied(ctx)
    width = max((len(p["name"]) for p in found), default=0)
    lines = [f"Profiles shipped with nodeagent {__version__} ({shipped.directory()}):"]
    for p in found:
        ext = f" (extends {', '.join(p['extends'])})" if p["extends"] else ""
        lines.append(f"  {p['name']:<{width}}  {p['description']}{ext}")
    if not found:
        lines.append("  (none: this installation carries no profiles)")
    if applied:
        lines.append(f"Applied to this node: {applied['name']} ({applied['status']}, {applied['time']}, "
                     f"from {applied['path']})")
    else:
        lines.append("Applied to this node: none yet")
    lines.append("Show one: nodeagent profiles show NAME")
    ctx.emit("\n".join(lines), {"directory": str(shipped.directory()), "profiles": found, "applied": applied})


@profiles.command()
@click.argument("name", shell_complete=lambda cx, param, incomplete: [
    n for n in __import__("nodeagent.profile.shipped").profile.shipped.names() if n.startswith(incomplete)])
@click.option("--merged", is_flag=True,
              help="Show the profile as apply uses it: everything it extends merged in, validated.")
@click.pass_obj
def show(ctx: Ctx, name: str, merged: bool) -> None:
    """Print the shipped profile NAME as a profile file (its comments say why each value is what it is).

    The output is a valid profile: redirect it to a file to start a profile of your own.
    """
    path = _find(name)
    about = _about(path)
    if merged:
        import yaml

        from .main import _load

        loaded = _load(str(path))
        body = yaml.safe_dump(loaded.data, sort_keys=False, allow_unicode=True)
        header = f"# {about['name']}, with everything it extends merged in (as apply uses it)\n"
        ctx.emit(header + body.rstrip("\n"), {**about, "profile": loaded.data})
        return
    text = _text(path)
    ctx.emit(text.rstrip("\n"), {**about, "text": text})

"""Global options anywhere on the command line, read with click's own option definitions.

``nodeagent plan P --simulate h100-cxl`` means ``nodeagent --simulate h100-cxl plan P``: an operator (and the
README) puts options where they like. :func:`hoist` moves the group's options that follow the command in
front of it, walking the arguments the way click will: an option of the command that takes a value keeps its
value (``--facts --root`` is a file named ``--root``), ``--`` ends the options, and an option the command
defines itself stays the command's. :func:`global_value` answers "which ``--format`` was asked for" with the
same walk, for the errors click raises before any option is processed.
"""

from __future__ import annotations

import click


def _takes_value(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and not param.is_flag and not param.count


def _option_index(command: click.Command, ctx: click.Context) -> dict[str, click.Parameter]:
    return {name: p for p in command.get_params(ctx) for name in (*p.opts, *p.secondary_opts)}


def _split(token: str) -> tuple[str, str | None]:
    name, eq, value = token.partition("=")
    return (name, value) if eq and name.startswith("--") else (token, None)


def hoist(group: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """``args`` with the group's options moved before the (sub)command name; the rest in order."""
    own = _option_index(group, ctx)
    front: list[str] = []
    rest: list[str] = []
    command: click.Command | None = None
    options: dict[str, click.Parameter] = own
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            rest.extend(args[i:])
            break
        name, inline = _split(token)
        if command is not None and name in own and name not in options:
            param = own[name]
            take = _takes_value(param) and inline is None
            front.extend(args[i:i + 1 + take])
            i += 1 + take
            continue
        target = front if command is None else rest
        if name in options:
            take = _takes_value(options[name]) and inline is None
            target.extend(args[i:i + 1 + take])
            i += 1 + take
            continue
        i += 1
        if token.startswith("-"):
            target.append(token)
            continue
        parent = command if command is not None else group
        sub = parent.get_command(ctx, token) if isinstance(parent, click.Group) else None
        rest.append(token)
        if sub is not None:
            command, options = sub, _option_index(sub, ctx)
        elif command is None:  # not a command (click will say so): its options are unknown
            command, options = group, {}
    return front + rest


def global_value(group: click.Group, args: list[str], name: str, default: str) -> str:
    """The value of the group's option ``name`` (e.g. ``--format``) wherever it was written; the last wins."""
    ctx = click.Context(group, info_name=group.name, resilient_parsing=True)
    args = hoist(group, ctx, args)
    value = default
    own = _option_index(group, ctx)
    i = 0
    while i < len(args):
        token, inline = _split(args[i])
        if token == "--" or (token not in own and not token.startswith("-")):
            break  # the command: everything the group parses came before it
        if token == name:
            if inline is not None:
                value = inline
            elif i + 1 < len(args):
                value = args[i + 1]
        i += 1 + (_takes_value(own[token]) and inline is None) if token in own else 1
    return value

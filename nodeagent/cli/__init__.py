"""The command line: one module per command group, and the command table in :mod:`.main`."""


def main() -> int:
    """The ``nodeagent`` command (and ``python -m nodeagent``): :func:`nodeagent.cli.main.main` with the process's
    own command line. The cyclic collector is paused before the command line's modules load (click and the standard
    library it pulls are most of a command's start-up, and all of it lives to the end of the process, so a
    collection while it loads finds nothing); ``main`` then keeps it paused for a one-shot command only."""
    import gc

    gc.disable()
    from .main import main as run

    return run()

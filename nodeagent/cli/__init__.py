"""The command line: one module per command group, and the command table in :mod:`.main`."""

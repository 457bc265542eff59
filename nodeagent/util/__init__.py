"""Leaf helpers that import nothing of nodeagent's: exit codes and errors, kernel formats, units,
timestamps, vocabularies and the cheap dataclass."""

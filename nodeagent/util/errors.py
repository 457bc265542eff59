"""Exit codes and the exceptions that carry them.

One table for the whole tool: every error a user can cause is a :class:`NodeagentError` subclass whose
``exit_code`` is looked up here, and the CLI maps exceptions to codes in exactly one place
(:func:`nodeagent.cli.main.main`).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # success, or nothing to change
    ERROR = 1  # runtime error (includes a plan this kernel cannot carry out)
    CHANGES = 2  # changes pending (plan --detailed-exitcode)
    DRIFT = 3  # drift found
    CHECK_FAILED = 4  # an error-severity check failed
    PARTIAL = 5  # apply partially done: some changes blocked or failed
    USAGE = 64  # command-line usage error (click's default 2 remapped)
    INVALID_PROFILE = 65  # the profile (or a facts file) is invalid
    BUSY = 75  # another nodeagent run held the state lock past --lock-timeout: nothing was done, try again
    NEEDS_ROOT = 77  # must run as root
    OWNER_CONFLICT = 78  # another owner manages this node (`run` beside the host's enabled apply unit)


class NodeagentError(Exception):
    """Base of every error a user can cause. ``str(err)`` is the whole message; ``hint`` says the fix."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(NodeagentError):
    exit_code = ExitCode.USAGE


class ProfileError(NodeagentError):
    """A profile that cannot be loaded or validated. ``errors`` holds one line per problem."""

    exit_code = ExitCode.INVALID_PROFILE

    def __init__(self, errors: list[str], *, hint: str | None = None) -> None:
        super().__init__("\n".join(errors), hint=hint)
        self.errors = errors


class NeedsRootError(NodeagentError):
    exit_code = ExitCode.NEEDS_ROOT


class HostError(NodeagentError):
    """A read, write or command on the node failed. ``path`` names what was touched."""

    def __init__(self, message: str, *, path: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path


class MissingError(HostError):
    """ENOENT: the attribute or device does not exist (on this kernel)."""


class RejectedError(HostError):
    """EINVAL: the kernel refused the value."""


class BusyError(HostError):
    """EBUSY: the resource is in use."""


class PermissionDeniedError(HostError):
    """EACCES/EPERM: not allowed (not root, read-only attribute, or a refused state transition)."""


class NoSpaceError(HostError):
    """ENOSPC/EDQUOT: the filesystem (or the user's quota on it) is full."""


class NotAllowedError(HostError):
    """A write outside the agent's allow-list, or a path that escapes the root. Never a user setting."""


class KernelFormatError(HostError):
    """A kernel file that does not read as the kernel prints it: a list with an id beyond what the kernel allows, a
    number that is no number. ``path`` names the file; the tree under the root is not a kernel's."""


class CommandError(HostError):
    """An external command could not be run or failed."""

    def __init__(self, message: str, *, path: str | None = None, hint: str | None = None,
                 returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message, path=path, hint=hint)
        self.returncode = returncode
        self.stderr = stderr


class LockTimeoutError(NodeagentError):
    """Another nodeagent run holds the state lock."""

    exit_code = ExitCode.BUSY


class PlanError(NodeagentError):
    """The plan cannot be carried out on this node (unsupported knob, missing device...)."""


class PartialApplyError(NodeagentError):
    exit_code = ExitCode.PARTIAL


class ChangeSkipped(NodeagentError):
    """A change a resource chose not to attempt (e.g. an earlier step of the same kind failed): the engine
    records it as ``skipped`` and goes on."""


class NotRecorded(HostError):
    """A change was made on the node, but the record that closes it (ownership: the kdamond runs, the device is
    online) could not be written; the one written before its first write ("building") is on disk, so the next
    run finishes it. A kind raises it after its last write took effect: the executor records the change as
    ``applied`` — what it did, and that its record is missing — and makes no further change (exit 5)."""

    def __init__(self, done: str, cause: HostError) -> None:
        super().__init__(f"{done}; but its record could not be written: {cause.message}", path=cause.path,
                         hint=cause.hint)
        self.done = done
        self.cause = cause

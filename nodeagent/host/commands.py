"""External commands (daxctl, systemd-detect-virt, nvidia-smi...) run through ``sh``, rooted like the files.

On the real root (``/``) a binary is resolved on the host's PATH. On a simulated root it is resolved inside the
simulated tree (the simulator installs fake, faithful executables there), and on any other root nothing is
run: a binary of this host would describe this host, not the node under the root.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CommandError

#: Where binaries are looked up inside a simulated root, like a stock PATH.
ROOTED_PATH = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass
class CommandRunner:
    root: Path
    simulated: bool
    log: list[CommandResult] = field(default_factory=list)

    def which(self, name: str) -> str | None:
        """The executable that :meth:`run` would use for ``name``, or ``None`` when there is none."""
        if os.path.realpath(self.root) == "/":
            return shutil.which(name)
        if not self.simulated:
            return None
        inside = os.path.realpath(self.root) + "/"
        for d in ROOTED_PATH:
            cand = self.root / d / name
            # A simulated root's own fake, never a link out of it to this machine's binary (which would act on
            # this machine's kernel).
            if cand.is_file() and os.access(cand, os.X_OK) and os.path.realpath(cand).startswith(inside):
                return str(cand)
        return None

    def run(self, argv: list[str], *, timeout: float = 120.0, ok_codes: tuple[int, ...] | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        """Run ``argv`` with ``LANG=C``; the caller decides what a return code means unless ``ok_codes``."""
        name = argv[0]
        exe = self.which(name)
        if exe is None:
            if os.path.realpath(self.root) != "/" and not self.simulated:
                raise CommandError(
                    f"refusing to run {name} for root {self.root}: a host binary would act on this machine, "
                    "not on the node under --root", hint="use --root / on the node itself, or a simulated root")
            raise CommandError(f"{name}: command not found", hint=f"install the package that provides {name}")
        import sh  # imported here: 100 ms of import that only commands need

        full_env = {k: v for k, v in os.environ.items() if not k.startswith("LC_")}
        full_env.update({"LANG": "C", "LC_ALL": "C"})
        if env:
            full_env.update(env)
        start = time.monotonic()
        try:
            proc = sh.Command(exe)(*argv[1:], _env=full_env, _timeout=timeout, _ok_code=list(range(256)),
                                   _return_cmd=True, _in=None)
        except sh.TimeoutException:
            raise CommandError(f"{name} did not finish within {timeout:.0f}s", path=exe) from None
        except OSError as exc:
            raise CommandError(f"cannot run {exe}: {exc.strerror}", path=exe) from None
        result = CommandResult(tuple([exe, *argv[1:]]), proc.exit_code,
                               proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"),
                               time.monotonic() - start)
        self.log.append(result)
        if ok_codes is not None and result.returncode not in ok_codes:
            msg = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no message"
            raise CommandError(f"{' '.join(argv)} exited {result.returncode}: {msg}", path=exe,
                               returncode=result.returncode, stderr=result.stderr)
        return result

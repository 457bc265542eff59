"""Helpers for running the real ansible-playbook against simulated nodes on this machine.

(No __init__.py in this directory on purpose: as a package named ``ansible`` it would shadow ansible-core.)

Every host is ``ansible_connection=local`` with its own simulated root (``nodeagent_root``) and the test run's
Python as ``ansible_python_interpreter`` (so the module imports this checkout's nodeagent). Ansible's own state
(``ANSIBLE_HOME``, local and remote temp) lives under the test's tmp_path, and an empty config file keeps a
user's ansible.cfg out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ansible.module_utils.basic", reason="ansible-core is in the test extra: pip install -e '.[test]'")

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
BIN = Path(sys.executable).parent
_RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)",
                    re.MULTILINE)


@dataclass
class Run:
    rc: int
    out: str

    def recap(self) -> dict[str, dict[str, int]]:
        """``{host: {"ok":…, "changed":…, "failed":…}}`` from the PLAY RECAP."""
        return {m[1]: {"ok": int(m[2]), "changed": int(m[3]), "unreachable": int(m[4]), "failed": int(m[5]),
                       "skipped": int(m[6])} for m in _RECAP.finditer(self.out)}


def ansible_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "ansible-home"
    home.mkdir(exist_ok=True)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("")
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(cfg),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(home / "remote-tmp"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / "ansible"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_STDOUT_CALLBACK": "default",
        "LC_ALL": "C.UTF-8",
        **extra,
    }


def write_inventory(path: Path, hosts: dict[str, Path | dict], **group_vars: object) -> Path:
    """An inventory of local hosts in group ``nodes``; a host maps to its simulated root (or to its vars)."""
    entries = {name: ({"nodeagent_root": str(v)} if isinstance(v, Path) else v) for name, v in hosts.items()}
    doc = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                   "children": {"nodes": {"hosts": entries, "vars": dict(group_vars)}}}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def playbook(inventory: Path, book: str | Path, *args: str, env: dict[str, str], timeout: float = 120) -> Run:
    """Run the real ansible-playbook; ``book`` names a file in tests/ansible/playbooks or is a path."""
    path = book if isinstance(book, Path) else PLAYBOOKS / book
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(path), *args],
                          env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return Run(proc.returncode, proc.stdout + proc.stderr)

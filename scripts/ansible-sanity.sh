#!/usr/bin/env bash
# Run `ansible-test sanity` on the nodeagent.tiering collection (make ansible-sanity).
#
# ansible-test makes a virtualenv per sanity test and bootstraps pip into it with a script it downloads from
# ci-files.testing.ansible.com. Where that host cannot be reached, this puts a stand-in into ansible-test's cache
# (only when none is there) that installs pip from the standard library's bundled wheel; the sanity tools
# themselves (pylint, yamllint, voluptuous...) still come from PyPI.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${VENV_BIN:-$repo/.venv/bin}"
pip_version="$("$bin/python" - <<'PY'
import pathlib, re, ansible_test
src = (pathlib.Path(ansible_test.__file__).parent / "_internal/python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)"
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [ ! -e "$cache" ]; then
    mkdir -p "$(dirname "$cache")"
    cat > "$cache" <<'PY'
# Stand-in for ansible-test's pip bootstrap script (written by nodeagent's scripts/ansible-sanity.sh).
import ensurepip

ensurepip.bootstrap(upgrade=True)
PY
fi
cd "$repo/ansible/ansible_collections/nodeagent/tiering"
rm -rf tests/output
"$bin/ansible-test" sanity --python "$("$bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" "$@"

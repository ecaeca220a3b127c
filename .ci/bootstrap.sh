#!/usr/bin/env bash
# Creates .venv and installs the project with its test extras.
# Works on a bare Debian Python 3.11 where `python3 -m venv` lacks ensurepip
# (python3-venv not installed): then pip itself is fetched from PyPI as a wheel.
set -euo pipefail
venv=${1:-.venv}
py=${PYTHON:-}
if [ -z "$py" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1; then py=$cand; break; fi
  done
fi
[ -n "$py" ] || { echo "bootstrap: no python3.11 or python3 on PATH" >&2; exit 1; }
"$py" - <<'PYEOF' || { echo "bootstrap: Python >= 3.11 is required" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)
PYEOF

if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    echo "bootstrap: venv without ensurepip; fetching pip from PyPI" >&2
    rm -rf "$venv"
    "$py" -m venv --without-pip "$venv"
    "$venv/bin/python" - <<'PYEOF'
import json, subprocess, sys, tempfile, urllib.request, os
meta = json.load(urllib.request.urlopen("https://pypi.org/pypi/pip/json", timeout=60))
wheel = next(f for f in meta["urls"] if f["filename"].endswith(".whl"))
path = os.path.join(tempfile.mkdtemp(), wheel["filename"])
urllib.request.urlretrieve(wheel["url"], path)
subprocess.check_call([sys.executable, os.path.join(path, "pip"), "install", "--no-cache-dir", path])
PYEOF
  fi
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e ".[test]"

#!/usr/bin/env bash
# Creates .venv and installs the project with its test extras, at the versions pinned in constraints.txt
# (refresh those with `make lock`). Works on a bare Debian Python 3.11 where `python3 -m venv` lacks
# ensurepip (python3-venv not installed): then the pinned pip itself is fetched from PyPI as a wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
constraints=$PWD/constraints.txt
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

pinned() { sed -n "s/^$1==//p" "$constraints"; }
if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    echo "bootstrap: venv without ensurepip; fetching pip $(pinned pip) from PyPI" >&2
    rm -rf "$venv"
    "$py" -m venv --without-pip "$venv"
    "$venv/bin/python" - "$(pinned pip)" <<'PYEOF'
import json, subprocess, sys, tempfile, urllib.request, os
index = urllib.request.Request("https://pypi.org/simple/pip/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(index, timeout=60))["files"]
wheel = next(f for f in files if f["filename"] == f"pip-{sys.argv[1]}-py3-none-any.whl")
path = os.path.join(tempfile.mkdtemp(), wheel["filename"])
urllib.request.urlretrieve(wheel["url"], path)
subprocess.check_call([sys.executable, os.path.join(path, "pip"), "install", "--quiet", "--no-cache-dir", path])
PYEOF
  fi
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
"${pip[@]}" install -c "$constraints" pip setuptools wheel
# The build tools come from the pinned set too (no isolated build environment with whatever is newest).
# setuptools' notice that an editable install maps the package folders is expected here: not shown to newcomers.
PYTHONWARNINGS="ignore:Editable installation" \
  "${pip[@]}" install -c "$constraints" --no-build-isolation -e ".[test]"

# The numba kernels compile on their first use, for minutes, and load from numba's cache afterwards: compiled here
# once, so that neither the first `aipu` command nor the tests spend that time (`aipu warm-up`).
if ! "$venv/bin/aipu" warm-up --check >/dev/null; then
  echo "bootstrap: compiling the numba kernels once, for numba's cache (this takes minutes)..." >&2
  started=$SECONDS
  "$venv/bin/aipu" warm-up >/dev/null
  echo "bootstrap: numba kernels compiled in $((SECONDS - started)) s" >&2
fi

# The HTML report's test opens it in a real browser: Debian's chromium, driven headless by Playwright (which
# cannot download its own browser builds here). Installed with `--browser` (make test does), as root or sudo.
if [ "${2:-}" = "--browser" ] && ! command -v chromium >/dev/null 2>&1; then
  as_root=()
  [ "$(id -u)" = 0 ] || as_root=(sudo -n)
  echo "bootstrap: installing Debian's chromium for the browser test" >&2
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

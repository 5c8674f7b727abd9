#!/usr/bin/env bash
# Creates bench/.agentdojo-venv for the AgentDojo firewall benchmark (bench/agentdojo_bench.py):
# the gateway installed editable from this repository, plus agentdojo==0.1.35, in one pip resolve.
#
# AgentDojo brings its own dependencies (openai, anthropic, langchain, google-genai, …); it must not
# move any version the gateway pins. After the install this script compares every pinned
# `name==version` of pyproject.toml's `dependencies` with what the venv holds and fails on a
# difference (then run the gateway from the project's own venv: agentdojo_bench.py --gateway-python).
#
# Usage: bash bench/setup_agentdojo_venv.sh            (idempotent; re-run after pyproject changes)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/bench/.agentdojo-venv"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
printf '*\n' > "$venv/.gitignore"   # git leaves the venv alone (as Python 3.13's venv does by itself)
"$venv/bin/pip" install --quiet -e "$root" "agentdojo==0.1.35"

"$venv/bin/python" - "$root/pyproject.toml" <<'EOF'
"""Every exact pin of the project's dependencies must hold in this venv."""
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version

with open(sys.argv[1], "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
bad = []
checked = 0
for dep in deps:
    if ";" in dep:  # environment markers (uvloop off Windows): checked only where they apply
        try:
            from packaging.markers import Marker
        except ImportError:  # the venv may lack packaging; pip vendors it
            from pip._vendor.packaging.markers import Marker
        dep, marker = dep.split(";", 1)
        if not Marker(marker.strip()).evaluate():
            continue
    match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s]+)\s*", dep)
    if not match:
        continue
    name, _, pinned = match.groups()
    try:
        have = version(name)
    except PackageNotFoundError:
        have = "missing"
    checked += 1
    if have != pinned:
        bad.append(f"{name}: pinned {pinned}, venv has {have}")
import agentdojo  # noqa: F401  (imports cleanly next to the gateway)
print(f"agentdojo {version('agentdojo')}, {checked} pinned dependencies checked")
if bad:
    print("the project's pins moved:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
print("every pin holds (e.g. mcp " + version("mcp") + ", pydantic " + version("pydantic") + ")")
EOF

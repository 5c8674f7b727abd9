#!/usr/bin/env bash
# The LiteLLM proxy, in a virtual environment of its own, as the overhead benchmark's baseline.
# litellm[proxy] pinned: 1.110.2's proxy extra is not on the registry; 1.108.7 is what it resolves to.
set -euo pipefail
dest="${1:-bench/.litellm-venv}"
python3 -m venv "$dest"
"$dest/bin/pip" install --quiet 'litellm[proxy]==1.108.7'
echo "$dest/bin/litellm"

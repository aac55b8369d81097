#!/usr/bin/env bash
# Create ./.venv (once) and install gpu-magics into it, editable, with the extras given as $1 (e.g. "test,dev").
# Building the JupyterLab extension needs Node.js >= 18 and npm; jlpm (Yarn) comes with JupyterLab.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "  creating .venv with $python"
  "$python" -m venv .venv
fi
echo "  pip: upgrading pip"
.venv/bin/python -m pip install -q --upgrade pip
# The build backend and JupyterLab (for jlpm) first, so the editable build can use them from this environment;
# jupyter_client 8.9 or later knows start.sh's KernelManager.transport_encryption (an older one warns at every kernel).
echo "  pip: JupyterLab and the build tools"
.venv/bin/python -m pip install -q "hatchling>=1.21" "hatch-jupyter-builder>=0.8.3" "hatch-nodejs-version>=0.3.2" \
  "jupyterlab>=4.2,<5" "jupyter_client>=8.9"
extras=${1:-}
target="."
[ -n "$extras" ] && target=".[$extras]"
echo "  pip: gpu-magics${extras:+ [$extras]} (editable; builds the JupyterLab extension the first time)"
.venv/bin/python -m pip install -q -e "$target"
if [[ ",$extras," == *",test,"* || ",$extras," == *",dev,"* || ",$extras," == *",docs,"* ]]; then
  # %%gpurun spmd --init torch on CPU ranks (gloo) and DDP in the tests and in the SPMD tutorial the docs build runs:
  # the CPU build of torch. Where it cannot be installed the torch tests skip, saying so.
  echo "  pip: torch (CPU build) for the SPMD tests"
  .venv/bin/python -m pip install -q "torch==2.13.0" || echo "  (torch not installed: the torch SPMD tests will skip)"
fi

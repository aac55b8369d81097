#!/usr/bin/env bash
# Build the documentation site into docs/_build/html, offline, with warnings as errors and nitpicky references:
# the CPU example notebooks run while it builds (an error in a cell fails it), the stored GPU runs are shown as they
# ran, the reference pages are written from the code; the external links are checked where asked.
#
# bash scripts/docs.sh            set up .venv with the docs extra where it lacks it, then build
# bash scripts/docs.sh --no-setup build with .venv as it is (scripts/test.sh has set it up)
# Open docs/_build/html/index.html. GPU_MAGICS_DOCS_LINKCHECK=1 also checks the external links (needs a network).
set -euo pipefail
cd "$(dirname "$0")/.."
# The docs extra: Sphinx and its extensions, and the libraries the SPMD tutorial runs (accelerate, lightning, deepspeed).
DOCS_MODULES="myst_nb pydata_sphinx_theme sphinx_design sphinx_copybutton accelerate lightning deepspeed"
if [ "${1:-}" != "--no-setup" ] && ! .venv/bin/python -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(name) is None for name in sys.argv[1:]))" $DOCS_MODULES 2>/dev/null; then
  bash scripts/setup-env.sh "docs"
fi
# The notebooks run on this machine's CPU (simulated GPUs would only confuse a reader): no fake source from outside;
# their kernels use an IPython profile of their own (as a fresh notebook would), which keeps the kernels' start-up
# log to errors (ipykernel warns of its loopback TCP transport at every start).
unset GPU_MAGICS_SOURCE
export IPYTHONDIR="$PWD/docs/_build/ipython"
mkdir -p "$IPYTHONDIR/profile_default"
echo 'c.IPKernelApp.log_level = "ERROR"' >"$IPYTHONDIR/profile_default/ipython_kernel_config.py"
.venv/bin/python -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
echo "docs: built docs/_build/html/index.html"

# External links only when asked (GPU_MAGICS_DOCS_LINKCHECK=1 on a machine with a network): CI here has none.
if [ "${GPU_MAGICS_DOCS_LINKCHECK:-0}" = 1 ]; then
  .venv/bin/python -m sphinx -W --keep-going -n -q -b linkcheck docs docs/_build/linkcheck
  echo "docs: external links checked"
else
  echo "docs: external links not checked (GPU_MAGICS_DOCS_LINKCHECK=1 checks them where a network is reached);" \
    "the links inside the site were checked by the build"
fi

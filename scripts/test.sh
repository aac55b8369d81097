#!/usr/bin/env bash
# Set up (once) and run the whole test suite: ruff, mypy, the extension's jest tests, pytest (CPU tests, real
# IPython shells, LocalCluster processes, a real jupyter-server, notebooks through real kernels) and the end-to-end
# test of the side panel in JupyterLab on headless Chromium. GPU tests (tests/gpu, marker gpu) skip without a GPU.
# Extra arguments go to pytest (for example -k cluster, or -m "not browser").
set -uo pipefail
cd "$(dirname "$0")/.."
failed=()
step() {  # step NAME COMMAND...: run it, remember a failure, keep going so every result is seen
  local name=$1; shift
  echo "::: $name"
  "$@" || failed+=("$name")
}

bash scripts/setup-env.sh "test,dev" || { echo "setup failed"; exit 1; }
bash tests/browser/setup.sh || { echo "browser test setup failed"; exit 1; }

step "ruff" .venv/bin/ruff check gpu_magics tests benchmarks scripts
step "ruff format" .venv/bin/ruff format --check gpu_magics tests benchmarks scripts
step "mypy" .venv/bin/mypy
step "jest" bash -c "cd labextension && ../.venv/bin/jlpm test --ci"
step "labextension list" bash -c ".venv/bin/jupyter labextension list 2>&1 | tee /dev/stderr | grep -E 'gpu-magics.*enabled.*OK'"
step "pytest" .venv/bin/python -m pytest tests -p no:cacheprovider "$@"

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all checks passed"

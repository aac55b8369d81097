#!/usr/bin/env bash
# Set up (once) and run the whole test suite: ruff, mypy, the extension's jest tests, pytest (CPU tests, real
# IPython shells, LocalCluster processes, a real jupyter-server, notebooks through real kernels) and the end-to-end
# test of the side panel in JupyterLab on headless Chromium. GPU tests (tests/gpu, marker gpu) skip without a GPU.
# Debian's Prometheus (tests/prometheus/setup.sh) scrapes a real jupyter-server in the /metrics tests.
# A one-node SLURM (tests/slurm/setup.sh: Debian's slurmctld, slurmd, munge; needs root or sudo, else the SLURM
# tests skip) runs the tests marked slurm, with real jobs on this machine.
# pytest runs on several processes (pytest-xdist, --dist loadgroup: tests/conftest.py says what runs together);
# GPU_MAGICS_TEST_WORKERS sets how many (default: one per CPU core, at most 4).
# Extra arguments go to pytest (for example -k cluster, -m "not browser", or -n 0 for one process).
# After pytest, the documentation site is built (scripts/docs.sh: warnings are errors, the CPU notebooks run), with
# the screenshots the browser tests just took (into docs/_build/screenshots, which git ignores). A run leaves the
# tracked files as they were: a step after pytest and the docs fails on any tracked file they changed.
#
# bash scripts/test.sh --quick: the inner loop, in about a minute on 2 cores, with .venv already set up: ruff, ruff
# format, mypy, jest and `pytest --quick` (the tests not marked slow, browser or gpu: no real kernel, no cluster
# processes, no server or browser subprocess), without the set-up steps.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
failed=()
step() {  # step NAME COMMAND...: run it, remember a failure, keep going so every result is seen; say how long
  local name=$1 began=$SECONDS; shift
  echo "::: $name"
  "$@" || failed+=("$name")
  echo "::: $name: $((SECONDS - began)) s"
}

if [ "$quick" = 1 ]; then
  if ! .venv/bin/python -c "import xdist" 2>/dev/null || [ ! -d labextension/node_modules ]; then
    echo "no test environment yet: run bash scripts/test.sh once (it sets up .venv, pytest-xdist and the extension)"
    exit 1
  fi
else
  set_up_began=$SECONDS
  bash scripts/setup-env.sh "test,dev,docs" || { echo "setup failed"; exit 1; }
  # mypy (about a minute without its cache) checks while the next set-ups download and install: they wait on the
  # network and apt, not on the CPU; its step below prints what it said
  mypy_said=$(mktemp)
  ( .venv/bin/mypy > "$mypy_said" 2>&1; echo $? > "$mypy_said.rc" ) &
  mypy_pid=$!
  bash tests/browser/setup.sh || { echo "browser test setup failed"; exit 1; }
  bash tests/prometheus/setup.sh || { echo "Prometheus test setup failed"; exit 1; }
  bash tests/slurm/setup.sh || { echo "SLURM test setup failed"; exit 1; }
  echo "::: set-up: $((SECONDS - set_up_began)) s"
fi
tracked() {  # the tracked files' state: which differ from HEAD, and how (a file edited before the run is no fault)
  { git status --porcelain --untracked-files=no; git diff HEAD --binary; } 2>/dev/null | sha256sum
}
tracked_before=$(tracked)
cores=$(nproc 2>/dev/null || echo 2)
workers=${GPU_MAGICS_TEST_WORKERS:-$((cores < 4 ? cores : 4))}

step "ruff" .venv/bin/ruff check gpu_magics tests benchmarks scripts docs/conf.py docs/_ext
step "ruff format" .venv/bin/ruff format --check gpu_magics tests benchmarks scripts docs/conf.py docs/_ext
mypy_step() {  # the check started during the set-up, where it was (else now)
  if [ -z "${mypy_pid:-}" ]; then
    .venv/bin/mypy
    return
  fi
  wait "$mypy_pid"
  cat "$mypy_said"
  return "$(cat "$mypy_said.rc" 2>/dev/null || echo 1)"
}
step "mypy" mypy_step
step "jest" bash -c "cd labextension && ../.venv/bin/jlpm test --ci"
if [ "$quick" = 1 ]; then
  step "pytest --quick" .venv/bin/python -m pytest tests -p no:cacheprovider --quick -n "$workers" --dist loadgroup "$@"
else
  # printed, then checked (no tee to /dev/stderr: reopening a redirected log truncates it, leaving NUL bytes)
  step "labextension list" bash -c 'listed=$(.venv/bin/jupyter labextension list 2>&1); echo "$listed"; grep -qE "gpu-magics.*enabled.*OK" <<<"$listed"'
  step "pytest" .venv/bin/python -m pytest tests -p no:cacheprovider -n "$workers" --dist loadgroup --durations=15 "$@"
  step "docs" bash scripts/docs.sh --no-setup
fi
# the tests and the docs build write only where git ignores (test-artifacts/, docs/_build/, temporary folders): a
# tracked file they changed fails the run, named by git status
tracked_unchanged() {
  [ "$(tracked)" = "$tracked_before" ] && return 0
  echo "the run changed tracked files (git status --porcelain --untracked-files=no):"
  git status --porcelain --untracked-files=no
  return 1
}
step "tracked files unchanged" tracked_unchanged

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all checks passed"

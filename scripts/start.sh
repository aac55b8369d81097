#!/usr/bin/env bash
# Set up (once) and open JupyterLab with the gpu-magics extension on notebooks/quickstart.ipynb, in notebooks/: a
# working copy of examples/ that git ignores (the user's own notebooks and saved outputs stay there).
# With an NVIDIA driver present, CuPy and dask-cuda are installed to match its CUDA version; without a GPU, the
# notebooks run on the CPU backends. Extra arguments go to `jupyter lab` (for example --no-browser --port 8890).
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
  if [ "${cuda:-12}" -ge 13 ]; then extras="cuda13"; else extras="cuda12"; fi
  echo "gpu-magics: NVIDIA GPUs found (CUDA ${cuda:-?}); installing CuPy and dask-cuda ([$extras])."
fi
if [ -x .venv/bin/jupyter ]; then
  echo "gpu-magics: updating .venv (pip, quiet)..."
else
  echo "gpu-magics: first start: creating .venv and installing JupyterLab and gpu-magics (about 2 minutes on a 2-core machine)..."
fi
bash scripts/setup-env.sh "$extras"
echo "gpu-magics: installed; looking for GPUs..."
.venv/bin/python - <<'PY'
from gpu_magics import gpus
from gpu_magics.text import hints
inventory = gpus.inventory()
cpu_cluster = hints.cpu_cluster_command()
found, reason = inventory.devices(), inventory.unavailable_reason()
if found and reason is None:
    print(f"gpu-magics: {gpus.describe(found)} ready: %%gpurun gpu and %gpucluster use them.")
elif found:
    print(f"gpu-magics: {gpus.describe(found, inventory.simulated)} shown in the panels; {reason}:")
    print(f"  the notebooks run on the CPU backends (%%gpurun auto picks cpu-threads; {cpu_cluster}).")
else:
    print(f"gpu-magics: no GPU here ({reason}): the notebooks run on the CPU backends (cpu-single, cpu-threads),")
    print(f"  %%gpurun auto picks cpu-threads, and {cpu_cluster} gives a CPU cluster.")
PY
# JupyterLab serves notebooks/, a working copy of examples/ that git ignores: what is run and saved there (JupyterLab
# saves every 2 minutes), and every notebook made there, stays the user's and out of the commits, and the committed
# examples stay as they are. An example not there yet is copied; one there is never overwritten (delete it to get
# the committed one again).
# working copy: begin
mkdir -p notebooks
for example in examples/*.ipynb; do
  [ -e "notebooks/${example#examples/}" ] || cp "$example" notebooks/
done
# working copy: end
# JupyterLab marks a notebook modified on open when its kernel metadata differs from the running kernel's: give the
# quickstart this environment's Python version (the rest of its kernelspec is ipykernel's own).
.venv/bin/python - <<'PY'
import json, pathlib, platform
path = pathlib.Path("notebooks/quickstart.ipynb")
notebook = json.loads(path.read_text(encoding="utf-8"))
info = notebook["metadata"].setdefault("language_info", {})
if info.get("version") != platform.python_version():
    info["version"] = platform.python_version()
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"gpu-magics: quickstart.ipynb set to this Python ({platform.python_version()}), so it opens unmodified.")
PY
as_root=()
[ "$(id -u)" -eq 0 ] && as_root=(--allow-root)  # containers often run as root; JupyterLab refuses it otherwise
# The URL JupyterLab prints (with its token: what to open after --no-browser) and its "/" lead to the quickstart
# notebook rather than the Launcher.
# The file browser shows notebooks/, so the notebook's path there is quickstart.ipynb.
# scripts/lab-settings/overrides.json turns off JupyterLab's "get notified about Jupyter news?" popup (and its
# update check) for this server only.
# Its kernels get CurveZMQ keys (jupyter_client's transport_encryption, for kernelspecs that support it, as
# ipykernel's does): their traffic on 127.0.0.1 is encrypted, and ipykernel no longer warns at every kernel start
# that it runs over TCP without encryption.
echo "gpu-magics: starting JupyterLab on notebooks/quickstart.ipynb (notebooks/: your copies of examples/, not committed)..."
exec .venv/bin/jupyter lab --ServerApp.root_dir=notebooks --ServerApp.ip=127.0.0.1 \
  --LabApp.default_url=/lab/tree/quickstart.ipynb --LabApp.app_settings_dir=scripts/lab-settings \
  --KernelManager.transport_encryption=auto "${as_root[@]}" "$@"

"""Loading the extension does no GPU, CUDA or NVML work and imports no GPU library."""

from __future__ import annotations

import json
import subprocess
import sys

CHECK = """
import json, sys
from IPython.testing.globalipapp import start_ipython
shell = start_ipython()
shell.run_line_magic("load_ext", "gpu_magics")
import gpu_magics.cluster.control.lifecycle, gpu_magics.display, gpu_magics.server, gpu_magics.monitor
loaded = [name for name in ("pynvml", "cupy", "dask_cuda", "ipywidgets", "tornado") if name in sys.modules]
magics = sorted(shell.magics_manager.magics["line"]) + sorted(shell.magics_manager.magics["cell"])
print(json.dumps({"loaded": loaded, "magics": magics}))
"""


def test_load_ext_imports_no_gpu_library() -> None:
    output = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=120)
    report = json.loads(output.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    for name in ("gpurun", "gpucluster", "gpumonitor", "gpugraph"):
        assert name in report["magics"]

import statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "gpu_magics")
ip.run_cell("import dask, dask.array as da", store_history=False)
cell = "x = da.random.RandomState(42).normal(10, 1, size=(100000, 100000), chunks=10000)\nt_mean = float((x + 1)[::2, ::2].mean().compute())\n"
n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
with capture_output():
    ip.run_line_magic("config", "ClusterMagics.wait_for_workers = True")
    ip.run_line_magic("gpucluster", "--gpus 0,1,2,3 --name prof")
def run():
    with capture_output():
        t = time.perf_counter()
        ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor -o t_result", cell)
        return time.perf_counter() - t
for _ in range(3): run()
print("READY", flush=True)
ts = [run() for _ in range(n)]
print("median", statistics.median(ts), "tasks", ip.user_ns["t_result"].tasks, flush=True)
with capture_output():
    ip.run_line_magic("gpucluster", "stop")

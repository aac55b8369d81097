#!/usr/bin/env bash
# Run the GPU tests and the benchmarks on a machine with CUDA GPUs, in one go; the log goes to $OUT/gpu-check.log
# (default OUT: ./gpu-logs), executed example notebooks to $OUT/executed.
#   bash scripts/gpu-check.sh [STAGE...]
#     stages: env tests spmd seed session cluster levers large transfers scaling display monitor telemetry server
#             attach examples jobqueue (default: all but jobqueue, which tests runs too)
#     startup: %gpucluster start-up (returns, every worker warm, Run All) in a fresh and a used kernel against plain
#              LocalCUDACluster (1 GPU, medians of 3 fresh processes each), and a py-spy
#              profile of a fresh start (kernel, worker server and workers) where py-spy is carried
#     cuda-start: a worker's CUDA start phase by phase, 1 and N at once, with and without the driver kept started
#                 by another process (benchmarks/gpu_context_start.py --holder)
#     spmd: %%gpurun spmd with torch on the GPUs: tests/gpu/test_spmd_gpu.py (NCCL ranks on their workers' GPUs, DDP,
#           gloo CPU ranks, a DataLoader in a rank; the tests stage leaves that file to this stage when both run) and
#           benchmarks/spmd.py (an empty SPMD cell, fresh ranks to the first all_reduce and a DDP step, against torchrun)
#     breakdown: one cell split into its steps (the magic's own work, graph build, submit, scheduler, tasks, gather,
#                summary), medians of interleaved rounds: empty %%gpurun gpu/multi-gpu -q cells, the seed on one GPU
#                and on a one-worker %gpucluster (benchmarks/cell_breakdown.py; GPU 0)
#     parking: %gpucluster park and its resume through a real kernel on GPU 0 (benchmarks/parking.py; PARK_GIB=8 by
#              default): the workers alone twice, then with an NCCL rank's model and the kernel's CuPy arrays
#     empty: the median of 50 empty cells (plain, in a session, %%gpurun -q) on multi-gpu, gpu and cpu-threads
#     session: a plain cell after %gpurun multi-gpu / gpu against the same %%gpurun cell and plain dask (80 GB seed)
#     four: the seed on 1, 2, 4... GPUs against %%gpurun gpu in one process, with the split of each cell
#           (benchmarks/four_gpus.py; FOUR_ARGS="--config KEY=VALUE" measures a lever against the default,
#           FOUR_ARGS=--timeline prints one cell's tasks per worker)
#     cluster: the seed workload's multi-GPU rows (%gpucluster against plain LocalCUDACluster) on 1, 2, 4... GPUs
#     levers: where a multi-gpu cell's time goes and each lever against it, dask-cuda's array operations, py-spy
#     large: the seed at 400000^2 (1.28 TB) on every GPU: gpu, %gpucluster, plain LocalCUDACluster
#     transfers: an all-to-all rechunk over tcp and ucx (ucx needs the .whlucx wheels), bytes counted twice
#     scaling: the speed-cubing example at full size on 1, 2, 4... GPUs (CUDA_VISIBLE_DEVICES)
#     telemetry: the workers' GPU telemetry from 128 simulated GPUs (16 workers x 8) at 1 and 4 Hz
#     attach: the server's endpoints for a cluster from Dask's CLI (dask cuda worker), memory by notebook
#     jobqueue: %gpucluster --from with dask-jobqueue's LocalCluster running dask-cuda workers as its jobs (the
#               tests stage runs it too); needs dask-jobqueue: bash ../shared/device/wheels.sh .whl dask-jobqueue==0.9.0
# Python packages the machine lacks can be brought as wheels in .whl/ or .whlucx/ (installed into /tmp/site first).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
wheels=.whl
[ -d .whlucx ] && wheels=.whlucx  # the set with the UCX stack (../shared/device/wheels-ucx.sh), where carried
if [ -d "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
# Byte-compile what the wheels brought and the project, as pip does when it installs: where the machine sets
# PYTHONDONTWRITEBYTECODE, every new process (a fresh kernel, the worker server) would otherwise compile every module
# it imports from source again, seconds that no installed copy pays, and the start-up figures would show them.
python3 -m compileall -q -j 0 /tmp/site "$PWD/gpu_magics" > /dev/null 2>&1 || true
python3 - > /dev/null 2>&1 <<'PY' || true
import compileall, contextlib, importlib, sys
for name in ("numpy", "cupy", "dask.array", "distributed", "dask_cuda", "IPython", "ipykernel", "gpu_magics.magics.gpurun"):
    with contextlib.suppress(Exception):
        importlib.import_module(name)
for module in list(sys.modules.values()):  # the image's own packages too, where it was built without bytecode
    path = getattr(module, "__file__", None) or ""
    if path.endswith(".py"):
        with contextlib.suppress(Exception):
            compileall.compile_file(path, quiet=2)
PY
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env tests spmd seed session cluster levers large transfers scaling display monitor telemetry server
  attach examples)
spmd_apart=""  # the spmd stage runs the SPMD tests: the tests stage leaves them out where both run
case " ${stages[*]} " in *" spmd "*) spmd_apart="--ignore=tests/gpu/test_spmd_gpu.py" ;; esac
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
counts=""  # 1, 2, 4, ... up to the GPU count, and the count itself
for k in 1 2 4 8 16; do [ "$k" -le "$gpus" ] && counts="$counts,$k"; done
case ",$counts," in *",$gpus,"*) ;; *) counts="$counts,$gpus" ;; esac
counts=${counts#,}
status=0
run() {  # run NAME COMMAND...: log to $OUT/NAME.log, remember failures
  local name=$1; shift
  echo "=== $name: $*"
  local start=$SECONDS
  "$@" 2>&1 | tee -a "$OUT/gpu-check.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc in $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || status=1
}
for stage in "${stages[@]}"; do
  case $stage in
    env) run env bash -c 'nvidia-smi -L; python3 --version; python3 -c "import cupy, dask, distributed, dask_cuda; print(cupy.__version__, dask.__version__, distributed.__version__, dask_cuda.__version__)"' ;;
    tests) run pytest-gpu python3 -m pytest -m gpu tests/gpu -q -rA -p no:cacheprovider -o addopts="" --timeout 300 $spmd_apart \
        ${PYTEST_ARGS:-} ;;
    spmd)
      run spmd-tests python3 -m pytest -m gpu tests/gpu/test_spmd_gpu.py -q -rA -p no:cacheprovider -o addopts="" --timeout 300 \
        ${PYTEST_ARGS:-}
      run spmd python3 benchmarks/spmd.py --json "$OUT/spmd.json" ;;
    seed) run seed-1gpu env CUDA_VISIBLE_DEVICES=0 python3 benchmarks/seed_workload.py --json "$OUT/seed-1gpu.json" ;;
    startup)
      run startup python3 benchmarks/cluster_start.py --gpus 1 --repeat 2 --rounds 3 --json "$OUT/startup.json"
      if [ -x /tmp/site/bin/py-spy ]; then
        run startup-profile /tmp/site/bin/py-spy record -r 200 --subprocesses --idle -f speedscope -o "$OUT/startup.speedscope.json" \
          -- python3 benchmarks/cluster_start.py --child gpu-magics --gpu-count 1 --n 20000 --chunk 5000 --repeat 1
      fi ;;
    cuda-start) run cuda-start python3 benchmarks/gpu_context_start.py --processes "1,$gpus" --holder ;;
    session) run session python3 benchmarks/session_backend.py --json "$OUT/session.json" ;;
    parking) run parking env CUDA_VISIBLE_DEVICES=0 python3 benchmarks/parking.py --gib "${PARK_GIB:-8}" --json "$OUT/parking.json" ;;
    breakdown) run breakdown env CUDA_VISIBLE_DEVICES=0 python3 benchmarks/cell_breakdown.py --json "$OUT/breakdown.json" ;;
    empty) run empty-cells python3 benchmarks/session_backend.py --empty-only --count 50 --json "$OUT/empty.json" ;;
    four) run four-gpus python3 benchmarks/four_gpus.py --counts "$counts" --json "$OUT/four-gpus.json" ${FOUR_ARGS:-} ;;
    cluster) run multi-gpu python3 benchmarks/seed_workload.py --multi-gpu "$counts" --only-multi-gpu --json "$OUT/multi-gpu.json" ;;
    levers) run levers python3 benchmarks/multi_gpu_levers.py --operations --profile "$OUT/prof" --json "$OUT/levers.json" ;;
    large) run large python3 benchmarks/multi_gpu_levers.py --n 400000 --chunk 20000 --repeat 2 --only-seed \
        --json "$OUT/large.json" ;;
    transfers) run transfers env UCX_WARN_UNUSED_ENV_VARS=n python3 benchmarks/transfers.py --protocols tcp,ucx \
        --json "$OUT/transfers.json" ;;
    scaling)
      for k in ${counts//,/ }; do
        run "speed-cubing-${k}gpu" env CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((k - 1)))" \
          python3 scripts/run_examples.py --full --only speed-cubing --out "$OUT/executed-${k}gpu"
      done ;;
    display) run display python3 benchmarks/display_speed.py ;;
    monitor)
      run monitor-slow5 python3 -m benchmarks.sampler_cost --seconds 20 --slow-interval 5
      run monitor-slow2 python3 -m benchmarks.sampler_cost --seconds 20 --slow-interval 2 ;;
    telemetry) run telemetry python3 -m benchmarks.telemetry_cost --workers 16 --gpus 8 --hz 1,4 --seconds 20 --loopback-hosts \
        --cells 15 --json "$OUT/telemetry.json" ;;
    server) run server python3 benchmarks/server_gpu_check.py ;;
    attach) run server-attach python3 benchmarks/server_gpu_check.py --attach ;;
    jobqueue) run jobqueue-gpu python3 -m pytest -m gpu tests/gpu/test_jobqueue_gpu.py -q -rA -s -p no:cacheprovider \
        -o addopts="" --timeout 600 ;;
    examples) run examples python3 scripts/run_examples.py --full --out "$OUT/executed" ;;
    *) echo "unknown stage $stage"; status=1 ;;
  esac
done
echo "GPUs: $gpus; overall status $status"
exit $status

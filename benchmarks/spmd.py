"""``%%gpurun spmd`` against torchrun started from the same notebook kernel: what an SPMD cell costs, how long fresh
ranks take to their first all_reduce, and a DDP training step.

    python benchmarks/spmd.py                       # one rank per visible GPU (NCCL)
    python benchmarks/spmd.py --ranks 1             # one GPU
    python benchmarks/spmd.py --cpu                 # 2 CPU ranks (gloo), small sizes: runs anywhere, slowly
    python benchmarks/spmd.py --json results.json   # where the results go (default $OUT/spmd.json where OUT is set)

Everything runs in one real IPython shell (``start_ipython``, ``%load_ext gpu_magics``), as a notebook meets it;
the torchrun side is ``python -m torch.distributed.run --nnodes 1 --nproc-per-node N script.py`` started from that
kernel with ``subprocess``, the script written to a temporary file, on the same GPUs.

- (ii) start-up, measured first (fresh ranks): from ``%gpucluster`` to the first finished ``all_reduce`` of an
  ``%%gpurun spmd --init torch`` cell (rank 0's clock), against torchrun from its start to the same all_reduce in the
  script (which makes its group as ``--init torch`` does). ``--start-rounds`` rounds, interleaved, torchrun first
  and no cluster running while it starts; one unmeasured torchrun run before them (the page cache then holds torch's
  files for both). The last round's cluster and ranks stay for the rest.
- (i) the median of ``--empty`` empty SPMD cells (``%%gpurun spmd -q`` with ``pass``) on those warm ranks, after 5
  unmeasured ones; a plain ``pass`` cell for reference. Target: <= 5 ms.
- (iii) a DDP training step (an MLP, ``--batch`` x ``--features`` -> ``--hidden`` -> 10, one fixed batch, SGD): the
  same code set up (``--warmup`` steps) in the SPMD ranks and in a torchrun job that stays running, then ``--rounds``
  rounds of ``--steps`` steps timed inside each (ended by ``torch.cuda.synchronize``), the two taking turns round by
  round (one SPMD cell per round; torchrun waits for a file to start its round and writes its timing to another), so
  the machine's drift from minute to minute falls on both alike. The ratio is of the medians of the per-step times
  (rank 0), against torchrun with the ranks' ``OMP_NUM_THREADS`` (1: distributed sets it for its workers, and the
  ranks inherit their worker's environment); where torchrun by itself would give another setting (it leaves it unset
  for one process per node), a torchrun job with that takes its turns too and is reported beside. Target: <= 1.02x.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from IPython.utils.capture import capture_output

TARGETS = {"empty_cell_ms": 5.0, "ddp_step_ratio": 1.02}
GPU_SIZES = {"batch": 512, "features": 1024, "hidden": 1024, "classes": 10, "warmup": 20, "steps": 200, "rounds": 50}
CPU_SIZES = {"batch": 64, "features": 256, "hidden": 256, "classes": 10, "warmup": 5, "steps": 20, "rounds": 5}

# The all_reduce both sides time to; in an SPMD cell ``--init torch`` made the group (and set the device) before.
ALL_REDUCE = """
import os, time, torch, torch.distributed as dist
bench_gpu = torch.cuda.is_available()
bench_device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if bench_gpu else torch.device("cpu")
bench_ones = torch.ones(1024, device=bench_device)
dist.all_reduce(bench_ones)
if bench_gpu:
    torch.cuda.synchronize()
bench_result = {
    "reduced_at": time.time(),
    "sum": float(bench_ones[0]),
    "backend": str(dist.get_backend()),
    "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
}
"""

# The DDP set-up (run once on each side) and one timed round (``bench_round()``: seconds per step).
TRAIN_SETUP = """
import os, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
bench_gpu = torch.cuda.is_available()
bench_local = int(os.environ["LOCAL_RANK"])
bench_device = torch.device("cuda", bench_local) if bench_gpu else torch.device("cpu")
torch.manual_seed(0)
bench_model = torch.nn.Sequential(
    torch.nn.Linear({features}, {hidden}), torch.nn.ReLU(), torch.nn.Linear({hidden}, {classes})
).to(bench_device)
bench_ddp = DistributedDataParallel(bench_model, device_ids=[bench_local] if bench_gpu else None)
bench_opt = torch.optim.SGD(bench_ddp.parameters(), lr=0.01)
bench_x = torch.randn({batch}, {features}, device=bench_device)
bench_y = torch.randint(0, {classes}, ({batch},), device=bench_device)


def bench_sync():
    if bench_gpu:
        torch.cuda.synchronize()


def bench_step():
    bench_opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(bench_ddp(bench_x), bench_y)
    loss.backward()
    bench_opt.step()
    return loss


def bench_round():
    began = time.perf_counter()
    for _ in range({steps}):
        bench_step()
    bench_sync()
    return (time.perf_counter() - began) / {steps}


for _ in range({warmup}):
    bench_step()
bench_sync()
bench_info = {{
    "torch": torch.__version__,
    "device": torch.cuda.get_device_name(bench_device) if bench_gpu else "cpu",
    "torch_threads": torch.get_num_threads(),
    "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    "world": dist.get_world_size(),
}}
"""
TRAIN_INFO = "bench_info['loss'] = float(bench_step().detach())\nbench_info"

# torchrun's side of the training: after the set-up, round N starts when the file go_N appears; rank 0 writes its
# time per step to done_N (each round ends with every rank in the same all_reduce, so they start together).
TORCHRUN_ROUNDS = """
import pathlib
bench_dir = pathlib.Path(sys.argv[1])
if dist.get_rank() == 0:
    (bench_dir / "ready").write_text("")
for bench_index in range({rounds}):
    while not (bench_dir / f"go_{{bench_index}}").exists():
        time.sleep(0.0005)
    bench_took = bench_round()
    if dist.get_rank() == 0:
        (bench_dir / f"done_{{bench_index}}.tmp").write_text(json.dumps(bench_took))
        (bench_dir / f"done_{{bench_index}}.tmp").rename(bench_dir / f"done_{{bench_index}}")
bench_info["loss"] = float(bench_step().detach())
bench_result = bench_info
"""

# torchrun's side: the group as ``--init torch`` makes it (NCCL with the rank's device, else gloo), the body, rank 0
# writes ``bench_result`` to the file named by its first argument.
TORCHRUN_HEAD = """
import datetime, json, os, sys, time
import torch, torch.distributed as dist
bench_local = int(os.environ["LOCAL_RANK"])
if torch.cuda.is_available():
    torch.cuda.set_device(bench_local)
    dist.init_process_group(
        "nccl", device_id=torch.device("cuda", bench_local), timeout=datetime.timedelta(minutes=5)
    )
else:
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
"""
TORCHRUN_TAIL = """
if dist.get_rank() == 0:
    with open(sys.argv[-1], "w") as bench_file:
        json.dump(bench_result, bench_file)
dist.destroy_process_group()
"""


class CellFailed(RuntimeError):
    pass


def cell(shell: Any, code: str) -> Any:
    """Run one cell in the shell, its output kept out of the benchmark's; its result (raises where it failed)."""
    with capture_output() as captured:
        result = shell.run_cell(code)
    if not result.success:
        raise CellFailed(
            f"the cell failed:\n{code[:400]}\n--- output ---\n{(captured.stdout + captured.stderr)[-4000:]}"
        )
    return result.result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Torchrun:
    """The same code under torchrun, started from this kernel as a notebook would (``subprocess``)."""

    def __init__(self, workdir: Path, ranks: int, env: dict[str, str], timeout: float) -> None:
        self.workdir, self.ranks, self.env, self.timeout = workdir, ranks, env, timeout
        self.runs = 0

    def command(self, script: Path, *arguments: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(self.ranks),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            str(script),
            *(str(argument) for argument in arguments),
        ]

    def start(self, body: str, env: dict[str, str] | None = None) -> Job:
        """Start ``body`` under torchrun (in ``env``, default the kernel's), in a folder of its own."""
        self.runs += 1
        folder = self.workdir / f"torchrun_{self.runs}"
        folder.mkdir()
        script, output = folder / "script.py", folder / "result.json"
        script.write_text(TORCHRUN_HEAD + body + TORCHRUN_TAIL)
        began = time.time()
        process = subprocess.Popen(
            self.command(script, folder, output),
            env=self.env if env is None else env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return Job(process, folder, output, began, self.timeout)

    def run(self, body: str, env: dict[str, str] | None = None) -> tuple[dict[str, Any], float, float]:
        """Run ``body`` under torchrun to its end; rank 0's ``bench_result``, the time.time() it started at and its
        wall time."""
        job = self.start(body, env)
        result = job.finish()
        return result, job.began, time.time() - job.began


class Job:
    """One torchrun run: its process, its folder (the files it takes turns by) and rank 0's result."""

    def __init__(
        self, process: subprocess.Popen[str], folder: Path, output: Path, began: float, timeout: float
    ) -> None:
        self.process, self.folder, self.output, self.began, self.timeout = process, folder, output, began, timeout

    def wait_for(self, name: str) -> Path:
        """The file ``name`` in the job's folder, once it exists (the job failing or the timeout raise)."""
        path, deadline = self.folder / name, time.monotonic() + self.timeout
        while not path.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.fail(f"no {name}")
            time.sleep(0.0005)
        return path

    def finish(self) -> dict[str, Any]:
        try:
            self.process.wait(self.timeout)
        except subprocess.TimeoutExpired:
            self.fail("timed out")
        if self.process.returncode != 0 or not self.output.exists():
            self.fail(f"exit code {self.process.returncode}")
        result: dict[str, Any] = json.loads(self.output.read_text())
        return result

    def fail(self, why: str) -> None:
        if self.process.poll() is None:
            self.process.kill()
        said = self.process.communicate()[0] or ""
        raise RuntimeError(f"torchrun failed ({why}):\n{said[-4000:]}")


def measure_startup(shell: Any, torchrun: Torchrun, cluster_line: str, rounds: int) -> dict[str, Any]:
    """(ii) fresh ranks to the first finished all_reduce: %gpucluster + an --init torch cell, against torchrun."""
    torchrun.run(ALL_REDUCE)  # unmeasured: the page cache holds torch's files for both sides
    rows: list[dict[str, float]] = []
    for index in range(rounds):
        found, began, wall = torchrun.run(ALL_REDUCE)
        torchrun_s = found["reduced_at"] - began
        began = time.time()
        cell(shell, f"%gpucluster {cluster_line}")
        cluster_s = time.time() - began
        value = cell(shell, f"%%gpurun spmd --init torch -q\n{ALL_REDUCE}\nbench_result")
        cell_end_s = time.time() - began
        expected = float(torchrun.ranks)
        if value["sum"] != expected or found["sum"] != expected:
            raise RuntimeError(f"all_reduce of ones gave {value['sum']} (spmd), {found['sum']} (torchrun)")
        rows.append(
            {
                "spmd_s": round(value["reduced_at"] - began, 3),
                "spmd_cluster_s": round(cluster_s, 3),
                "spmd_cell_end_s": round(cell_end_s, 3),
                "torchrun_s": round(torchrun_s, 3),
                "torchrun_exit_s": round(wall, 3),
            }
        )
        print(f"  start-up round {index + 1}: {json.dumps(rows[-1])}", flush=True)
        if index < rounds - 1:
            cell(shell, "%gpucluster stop")
    spmd_s = statistics.median(row["spmd_s"] for row in rows)
    torchrun_s = statistics.median(row["torchrun_s"] for row in rows)
    return {
        "spmd_s": round(spmd_s, 3),
        "torchrun_s": round(torchrun_s, 3),
        "spmd_over_torchrun": round(spmd_s / torchrun_s, 3),
        "backend": value["backend"],
        "rank_omp_num_threads": value["omp_num_threads"],
        "rounds": rows,
        "torchrun_command": " ".join(torchrun.command(Path("script.py"), Path("result.json"))[1:]),
    }


def measure_empty(shell: Any, count: int) -> dict[str, Any]:
    """(i) empty SPMD cells on warm ranks, and a plain empty cell for reference (milliseconds)."""

    def times(code: str) -> list[float]:
        found = []
        with capture_output():
            for index in range(count + 5):
                began = time.perf_counter()
                result = shell.run_cell(code)
                took = time.perf_counter() - began
                if not result.success:
                    raise CellFailed(f"{code!r} failed: {result.error_in_exec or result.error_before_exec}")
                if index >= 5:
                    found.append(took * 1e3)
        return found

    spmd = times("%%gpurun spmd -q\npass")
    plain = times("pass")
    return {
        "spmd_ms": round(statistics.median(spmd), 3),
        "spmd_min_ms": round(min(spmd), 3),
        "spmd_p90_ms": round(sorted(spmd)[int(0.9 * (len(spmd) - 1))], 3),
        "plain_ms": round(statistics.median(plain), 4),
        "count": count,
    }


def measure_train(shell: Any, torchrun: Torchrun, sizes: dict[str, int], rank_threads: str | None) -> dict[str, Any]:
    """(iii) the same DDP rounds timed in SPMD cells and in torchrun jobs that stay running, taking turns round by
    round (the order turning too); per-step medians. See the module's docstring for the threads."""
    setup = TRAIN_SETUP.format(**sizes)
    matched = dict(torchrun.env)
    if rank_threads is None:
        matched.pop("OMP_NUM_THREADS", None)
    else:
        matched["OMP_NUM_THREADS"] = rank_threads
    envs = {"torchrun": matched}
    own = torchrun.env.get("OMP_NUM_THREADS") or ("1" if torchrun.ranks > 1 else None)  # what torchrun gives
    if own != rank_threads:
        envs["torchrun, its own threads"] = torchrun.env
    jobs = {side: torchrun.start(setup + TORCHRUN_ROUNDS.format(**sizes), env) for side, env in envs.items()}
    cell(shell, f"%%gpurun spmd -q\n{setup}")
    for job in jobs.values():
        job.wait_for("ready")
    sides = ["spmd", *jobs]
    times: dict[str, list[float]] = {side: [] for side in sides}
    for index in range(sizes["rounds"]):
        for side in sides[index % len(sides) :] + sides[: index % len(sides)]:
            if side == "spmd":
                took = float(cell(shell, "%%gpurun spmd -q\nbench_round()"))
            else:
                (jobs[side].folder / f"go_{index}").write_text("")
                took = float(json.loads(jobs[side].wait_for(f"done_{index}").read_text()))
            times[side].append(took)
    details = {"spmd": cell(shell, f"%%gpurun spmd -q\n{TRAIN_INFO}")}
    details.update({side: job.finish() for side, job in jobs.items()})
    step_ms = {side: statistics.median(values) * 1e3 for side, values in times.items()}
    paired = [ours / theirs for ours, theirs in zip(times["spmd"], times["torchrun"], strict=True)]
    for side, value in step_ms.items():
        print(f"  DDP, {side}: median {value:.4f} ms per step over {len(times[side])} rounds", flush=True)
    return {
        "spmd_step_ms": round(step_ms["spmd"], 4),
        "torchrun_step_ms": round(step_ms["torchrun"], 4),
        "spmd_over_torchrun": round(step_ms["spmd"] / step_ms["torchrun"], 4),
        "paired_ratio_median": round(statistics.median(paired), 4),
        "step_ms": {side: round(value, 4) for side, value in step_ms.items()},
        "all_ms": {side: [round(value * 1e3, 4) for value in values] for side, values in times.items()},
        "sizes": sizes,
        "details": details,
    }


def verdict(value: float, limit: float) -> str:
    return f"{'<=' if value <= limit else '>'} {limit} target"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="CPU ranks (gloo) and small sizes, no GPU needed")
    parser.add_argument("--ranks", type=int, default=0, help="ranks (default: every visible GPU; 2 with --cpu)")
    parser.add_argument("--empty", type=int, default=50, help="empty SPMD cells timed (median reported)")
    parser.add_argument("--start-rounds", type=int, default=0, help="start-up rounds (default 3; 2 with --cpu)")
    for name in GPU_SIZES:
        parser.add_argument(f"--{name}", type=int, help=f"DDP {name} (default {GPU_SIZES[name]}; --cpu: smaller)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one torchrun run may take")
    parser.add_argument("--json", type=Path, help="write the results here (default: $OUT/spmd.json where OUT is set)")
    args = parser.parse_args()
    if args.json is None and os.environ.get("OUT"):
        args.json = Path(os.environ["OUT"]) / "spmd.json"

    from gpu_magics import gpus

    devices = gpus.inventory().devices()
    if not args.cpu and not devices:
        parser.error("no GPU is visible here; --cpu runs the benchmark on CPU ranks (gloo)")
    ranks = args.ranks or (2 if args.cpu else len(devices))
    if not args.cpu and ranks > len(devices):
        parser.error(f"--ranks {ranks}: only {len(devices)} GPUs are visible")
    sizes = dict(CPU_SIZES if args.cpu else GPU_SIZES)
    sizes.update({name: getattr(args, name) for name in sizes if getattr(args, name) is not None})
    start_rounds = args.start_rounds or (2 if args.cpu else 3)

    env = dict(os.environ)
    if args.cpu:
        cluster_line = f"--cpu-workers {ranks}"
        env["CUDA_VISIBLE_DEVICES"] = ""
        hardware = f"{ranks} CPU ranks"
    else:
        cluster_line = "--gpus " + ",".join(str(index) for index in range(ranks))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(device.cuda_id for device in devices[:ranks])
        hardware = f"{ranks}x {devices[0].name}"

    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    assert shell is not None
    cell(shell, "%load_ext gpu_magics")
    print(f"spmd benchmark: {hardware}; torchrun: {sys.executable} -m torch.distributed.run", flush=True)
    with tempfile.TemporaryDirectory(prefix="spmd-bench-") as workdir:
        torchrun = Torchrun(Path(workdir), ranks, env, args.timeout)
        try:
            startup = measure_startup(shell, torchrun, cluster_line, start_rounds)
            empty = measure_empty(shell, args.empty)
            train = measure_train(shell, torchrun, sizes, startup["rank_omp_num_threads"])
        finally:
            cell(shell, "%gpucluster stop")

    print(f"spmd benchmark: {hardware}, {startup['backend']}")
    print(
        f"  (i)   empty SPMD cell on warm ranks: median {empty['spmd_ms']:.2f} ms "
        f"(min {empty['spmd_min_ms']:.2f}, p90 {empty['spmd_p90_ms']:.2f}; plain cell {empty['plain_ms']:.3f} ms) "
        f"({verdict(empty['spmd_ms'], TARGETS['empty_cell_ms'])})"
    )
    print(
        "  (ii)  fresh ranks to the first finished all_reduce: %gpucluster + spmd --init torch "
        f"{startup['spmd_s']:.2f} s vs torchrun {startup['torchrun_s']:.2f} s: "
        f"{startup['spmd_over_torchrun']:.2f}x (medians of {len(startup['rounds'])})"
    )
    print(
        f"  (iii) DDP step {sizes['batch']}x{sizes['features']} -> {sizes['hidden']} -> {sizes['classes']}: "
        f"spmd {train['spmd_step_ms']:.4f} ms vs torchrun {train['torchrun_step_ms']:.4f} ms: "
        f"{train['spmd_over_torchrun']:.3f}x ({verdict(train['spmd_over_torchrun'], TARGETS['ddp_step_ratio'])}; "
        f"round by round {train['paired_ratio_median']:.3f}x; OMP_NUM_THREADS={startup['rank_omp_num_threads']} on "
        "both sides)"
    )
    for side, value in train["step_ms"].items():
        if side not in ("spmd", "torchrun"):
            print(f"        {side} (OMP_NUM_THREADS as torchrun sets it): {value:.4f} ms")
    if args.json:
        results = {"hardware": hardware, "ranks": ranks, "empty": empty, "startup": startup, "train": train}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**results, "targets": TARGETS}, indent=1))
        print(f"results: {args.json}")


if __name__ == "__main__":
    main()

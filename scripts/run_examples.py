"""Execute the example notebooks top to bottom, save them with their outputs, and print timings and comparisons.

    python scripts/run_examples.py                          # every example at its small size (seconds each, CPU)
    python scripts/run_examples.py --full                   # the full size, without cpu-single in --compare cells
    python scripts/run_examples.py --full --keep-cpu-single # ... with it (minutes per comparison at full size)
    python scripts/run_examples.py --only speed-cubing --size-scale 0.5 --out /tmp/executed

Each example has one size line of the form ``N = 4_000  # on GPUs: N = 100_000 (...)``. ``--full`` puts the GPU
value in place of the small one (in the line itself, so values derived from it in the same cell follow), and
``--size-scale F`` multiplies whichever size is used. ``--skip-cpu-single`` (the default with ``--full``: one CPU
thread needs minutes per comparison at that size) rewrites ``%%gpurun --compare all``
into an explicit list without cpu-single: the backends this machine runs, multi-gpu only where an earlier
``%gpucluster`` started a cluster that is still up. The executed notebooks go to ``--out`` (default
``examples/executed/``), with ``summary.json``; the exit status is 1 if any notebook failed. Each executed notebook
records where and when it ran (its metadata ``gpu_magics_run``: hardware, date, commit, command), which the
documentation site shows above a stored run.

Needs only nbclient, nbformat and ipykernel besides what the examples themselves import; the kernel gets the
repository root on its ``PYTHONPATH``, so ``%load_ext gpu_magics`` works from a checkout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# ``NAME = small  # on GPUs: NAME = full ...`` (the number may use underscores).
SIZE_LINE = re.compile(
    r"^(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<small>[0-9][0-9_]*)\s*#\s*on GPUs?:\s*(?P=name)\s*=\s*(?P<full>[0-9][0-9_]*)"
    r"(?P<rest>.*)$",
    re.MULTILINE,
)
COMPARE_ALL = re.compile(r"--compare(\s+|=)all\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CLUSTER_QUERIES = ("status", "scale", "restart", "dashboard")
BACKEND_ORDER = ("cpu-threads", "gpu", "multi-gpu")
RUN_CLASS = "gpu-magics-run"  # the HTML class of a %%gpurun summary
COMPARE_CLASS = "gpu-magics-compare"  # ... and of a --compare table
SPMD_CLASS = "gpu-magics-spmd"  # ... and of a %%gpurun spmd cell's status rows


@dataclass(frozen=True)
class SizeLine:
    """The size variable of a notebook: where it is and its two values."""

    cell: int
    name: str
    small: int
    full: int


@dataclass
class Report:
    """What one notebook's run gave."""

    name: str
    seconds: float = 0.0
    size: str = ""
    error: str | None = None
    summaries: list[dict[str, str]] = field(default_factory=list)  # {"cell": first line, "text": summary}
    compares: list[dict[str, str]] = field(default_factory=list)
    slowest: list[tuple[float, str]] = field(default_factory=list)


def examples(only: list[str] | None = None) -> list[Path]:
    """The example notebooks, by name; ``only`` keeps those whose stem is listed (``.ipynb`` optional)."""
    found = sorted(EXAMPLES.glob("*.ipynb"))
    if not only:
        return found
    wanted = {name.removesuffix(".ipynb") for part in only for name in part.split(",") if name}
    unknown = wanted - {path.stem for path in found}
    if unknown:
        raise SystemExit(f"no example named {', '.join(sorted(unknown))}; there are {', '.join(p.stem for p in found)}")
    return [path for path in found if path.stem in wanted]


def find_size(nb: Any) -> SizeLine:
    """The notebook's size line; a ``ValueError`` unless there is exactly one."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for match in SIZE_LINE.finditer(cell.source):
            found.append(
                SizeLine(
                    index, match["name"], int(match["small"].replace("_", "")), int(match["full"].replace("_", ""))
                )
            )
    if len(found) != 1:
        raise ValueError(f"expected one line 'NAME = small  # on GPUs: NAME = full', found {len(found)}")
    return found[0]


def set_size(nb: Any, *, full: bool, scale: float = 1.0) -> tuple[str, int]:
    """Put the small or full size, times ``scale``, into the size line; returns the variable and its value."""
    size = find_size(nb)
    value = max(1, round((size.full if full else size.small) * scale))
    if not full and scale == 1.0:
        return size.name, value
    how = ("full size" if full else "small size") + ("" if scale == 1.0 else f" x {scale:g}")
    cell = nb.cells[size.cell]

    def replace(match: re.Match[str]) -> str:
        name, full_value = match["name"], match["full"]
        note = f"  [set by run_examples.py: {how}; small: {match['small']}]"
        return f"{name} = {value:_}  # on GPUs: {name} = {full_value}{match['rest']}{note}"

    cell.source = SIZE_LINE.sub(replace, cell.source, count=1)
    return size.name, value


def _magic_args(line: str, magic: str) -> str | None:
    stripped = line.strip()
    if stripped == magic or stripped.startswith(magic + " "):
        return stripped[len(magic) :].strip()
    return None


def skip_cpu_single(nb: Any, *, gpu: bool) -> int:
    """Rewrite ``--compare all`` into the backends without cpu-single, and drop cpu-single from explicit lists.

    ``gpu``: whether this machine has a GPU. multi-gpu is listed where an earlier ``%gpucluster`` line started a
    cluster that no ``%gpucluster stop`` has stopped. Returns the number of cells changed.
    """
    changed = 0
    cluster_up = False
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        for line in lines:
            args = _magic_args(line, "%gpucluster")
            if args is not None:
                action = args.split()[0] if args.split() else "start"
                if action == "stop":
                    cluster_up = False
                elif action not in CLUSTER_QUERIES:
                    cluster_up = True
        if not lines or _magic_args(lines[0], "%%gpurun") is None:
            continue
        first = lines[0]
        if COMPARE_ALL.search(first):
            backends = [b for b in BACKEND_ORDER if (b != "gpu" or gpu) and (b != "multi-gpu" or cluster_up)]
            if len(backends) > 1:  # with one backend left there is nothing to compare: keep cpu-single then
                first = COMPARE_ALL.sub(f"--compare {','.join(backends)}", first)
        else:
            match = re.search(r"--compare(\s+|=)(\S+)", first)
            if match and "cpu-single" in match[2].split(","):
                rest = [b for b in match[2].split(",") if b != "cpu-single"]
                if len(rest) > 1:
                    first = first[: match.start(2)] + ",".join(rest) + first[match.end(2) :]
        if first != lines[0]:
            cell.source = "\n".join([first, *lines[1:]])
            changed += 1
    return changed


def has_gpu() -> bool:
    """Whether this process sees a CUDA device (through CuPy, if it is installed)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return False


def kernel_env() -> dict[str, str]:
    """This process's environment with the repository root first on ``PYTHONPATH``."""
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        paths.insert(0, str(ROOT))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def execute(nb: Any, *, timeout: int = 600, kernel_name: str = "python3") -> None:
    """Run every cell in a fresh kernel started in ``examples/``; raises ``CellExecutionError`` on an error."""
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(EXAMPLES)}},
    )
    try:
        client.execute(env=kernel_env())
    finally:
        # nbclient answers SIGTERM/SIGINT by shutting the kernel down and carrying on: stop here instead.
        if getattr(client, "_async_cleanup_kernel_future", None) is not None:
            raise Stopped("stopped by a signal")


class Stopped(Exception):
    """The run was interrupted (SIGTERM or SIGINT) while a notebook ran."""


def _text(output: Any) -> str:
    if output.get("output_type") == "stream":
        return str(output.get("text", ""))
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}"
    return str(output.get("data", {}).get("text/plain", ""))


def outputs_text(nb: Any) -> str:
    """Every code cell's outputs as text (streams, plain-text forms, errors), in order."""
    return "\n".join(
        _text(output) for cell in nb.cells if cell.cell_type == "code" for output in cell.get("outputs", [])
    )


def gpurun_outputs(nb: Any) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The ``%%gpurun`` summaries (an SPMD cell's status rows among them) and ``--compare`` tables in the outputs:
    ``{"cell", "text"}`` each."""
    summaries, compares = [], []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        first = cell.source.splitlines()[0] if cell.source else ""
        for output in cell.get("outputs", []):
            html = str(output.get("data", {}).get("text/html", ""))
            if COMPARE_CLASS in html:
                compares.append({"cell": first, "text": _text(output)})
            elif RUN_CLASS in html or SPMD_CLASS in html:
                summaries.append({"cell": first, "text": _text(output)})
    return summaries, compares


def describe_error(error: BaseException) -> str:
    """One line for a failed run: the exception the cell raised (``ename: evalue``), or the client's error."""
    ename, evalue = getattr(error, "ename", None), getattr(error, "evalue", None)
    if ename:
        return f"{ename}: {evalue}"
    lines = ANSI.sub("", str(error)).strip().splitlines()
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"


def _cell_seconds(cell: Any) -> float | None:
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not start or not end:
        return None
    from datetime import datetime

    return (
        datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))
    ).total_seconds()


def _output(*command: str) -> str:
    """What ``command`` prints, or "" where it cannot run."""
    if shutil.which(command[0]) is None:
        return ""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False, cwd=ROOT)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def hardware() -> str:
    """This machine's GPUs by model and its CPU threads, as "4x NVIDIA H200, 64 CPU threads"."""
    names = Counter(line.strip() for line in _output("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")
                    .splitlines() if line.strip())  # fmt: skip
    gpus = ", ".join(f"{count}x {name}" for name, count in names.items()) or "no GPU"
    return f"{gpus}, {os.cpu_count()} CPU threads"


def run_record(argv: list[str]) -> dict[str, str]:
    """Where and when the notebooks ran: what an executed notebook's metadata ``gpu_magics_run`` holds."""
    return {
        "hardware": hardware(),
        "date": dt.datetime.now(dt.UTC).date().isoformat(),
        "commit": _output("git", "rev-parse", "--short", "HEAD") or "unknown",
        "command": " ".join(["python scripts/run_examples.py", *argv]),
    }


def run_one(path: Path, args: argparse.Namespace, gpu: bool) -> Report:
    """Prepare, execute and save one notebook; never raises for a failing cell."""
    nb = nbformat.read(path, as_version=4)
    report = Report(name=path.stem)
    try:
        name, value = set_size(nb, full=args.full, scale=args.size_scale)
        report.size = f"{name} = {value:_}"
    except ValueError as error:
        report.size = f"unchanged ({error})"
    if args.skip_cpu_single:
        skip_cpu_single(nb, gpu=gpu)
    start = time.perf_counter()
    try:
        execute(nb, timeout=args.timeout, kernel_name=args.kernel)
    except Exception as error:  # CellExecutionError, DeadKernelError, a timeout
        report.error = describe_error(error)
    report.seconds = time.perf_counter() - start
    report.summaries, report.compares = gpurun_outputs(nb)
    timed = [
        (_cell_seconds(cell), cell.source.splitlines()[0])
        for cell in nb.cells
        if cell.cell_type == "code" and cell.source
    ]
    report.slowest = sorted(((round(s, 2), line) for s, line in timed if s is not None), reverse=True)[:3]
    nb.metadata["gpu_magics_run"] = args.record
    args.out.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, args.out / path.name)
    return report


def print_report(report: Report) -> None:
    status = "FAILED " + report.error if report.error else "ok"
    print(f"=== {report.name}: {report.seconds:.1f} s, {report.size}: {status}", flush=True)
    for seconds, line in report.slowest:
        print(f"    {seconds:8.2f} s  {line}")
    for summary in report.summaries:
        print(f"  {summary['cell']}\n    " + summary["text"].replace("\n", "\n    "))
    for compare in report.compares:
        print(f"  {compare['cell']}\n    " + compare["text"].replace("\n", "\n    "))
    print(flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="use the full (GPU) size of each example")
    parser.add_argument("--size-scale", type=float, default=1.0, help="multiply the size used by this factor")
    parser.add_argument("--only", action="append", help="run only these examples (stems, comma-separated or repeated)")
    skip = parser.add_mutually_exclusive_group()
    skip.add_argument(
        "--skip-cpu-single",
        dest="skip_cpu_single",
        action="store_true",
        default=None,
        help="leave cpu-single out of the %%%%gpurun --compare cells (the default with --full)",
    )
    skip.add_argument(
        "--keep-cpu-single",
        dest="skip_cpu_single",
        action="store_false",
        help="keep cpu-single in the comparisons even with --full (minutes per cell at the full size)",
    )
    parser.add_argument("--out", type=Path, default=EXAMPLES / "executed", help="where the executed notebooks go")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds one cell may run (default 1200)")
    parser.add_argument("--kernel", default="python3", help="the kernel to run them in (default python3)")
    args = parser.parse_args(argv)
    if args.size_scale <= 0:
        parser.error("--size-scale must be positive")
    if args.skip_cpu_single is None:
        args.skip_cpu_single = args.full
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.record = run_record(sys.argv[1:] if argv is None else argv)
    gpu = has_gpu()
    paths = examples(args.only)
    print(
        f"{len(paths)} example(s), {'full' if args.full else 'small'} size"
        f"{'' if args.size_scale == 1 else f' x {args.size_scale:g}'}, "
        f"{'a GPU' if gpu else 'no GPU'} visible here, cpu-single {'skipped' if args.skip_cpu_single else 'kept'} "
        f"in comparisons; notebooks to {args.out}",
        flush=True,
    )
    reports = []
    args.out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        report = run_one(path, args, gpu)
        print_report(report)
        reports.append(report)
        (args.out / "summary.json").write_text(json.dumps([asdict(r) for r in reports], indent=1) + "\n")
        if report.error and report.error.startswith("Stopped"):
            print("stopped by a signal: the remaining examples were not run", flush=True)
            return 1
    failed = [r.name for r in reports if r.error]
    total = sum(r.seconds for r in reports)
    print(
        f"{len(reports) - len(failed)} of {len(reports)} ran cleanly in {total:.0f} s"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

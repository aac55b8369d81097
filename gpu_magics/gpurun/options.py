"""Parsing the ``%%gpurun`` line into a frozen ``RunOptions``; every bad input is a one-line ``LineError``."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass

from gpu_magics.text.argparsing import (
    MagicArgumentParser,
    comma_list,
    non_negative_int,
    positive_float,
    positive_int,
    timeout_seconds,
    variable_name,
)
from gpu_magics.text.errors import LineError

BACKENDS: tuple[str, ...] = ("cpu-single", "cpu-threads", "gpu", "multi-gpu")
CHOICES: tuple[str, ...] = (*BACKENDS, "auto")
SPMD = "spmd"  # not a dask backend: the cell runs once on every worker (gpu_magics.spmd)
GROUP_LIBRARIES: tuple[str, ...] = ("torch", "jax")
DEFAULT_SPMD_TIMEOUT_MIN = 5.0
MOST_REPEATS = 1000  # --repeat: the most runs one cell is timed over
COMPARE_ALL = "all"  # --compare all: every backend this machine can run, in the order of BACKENDS
ALIASES: dict[str, str] = {
    "cpu": "cpu-threads",
    "single": "cpu-single",
    "threads": "cpu-threads",
    "multigpu": "multi-gpu",
    "multi_gpu": "multi-gpu",
    "cpu_single": "cpu-single",
    "cpu_threads": "cpu-threads",
}


@dataclass(frozen=True)
class RunOptions:
    """What one ``%%gpurun`` line asks for."""

    backend: str | None
    device: int | None = None
    device_free: bool = False  # --device free: the freest GPU, chosen when the cell runs
    workers: int | None = None
    repeat: int = 1
    compare: tuple[str, ...] = ()
    output: str | None = None
    quiet: bool = False
    monitor: bool = True
    rtol: float = 1e-3
    ranks: tuple[int, ...] | None = None  # spmd: --ranks
    show_ranks: tuple[int, ...] | None = None  # spmd: --output (the ranks whose lines show live)
    init: str | None = None  # spmd: --init torch|jax
    timeout_s: float | None = None  # spmd: --timeout (seconds) for collectives
    reset: bool = False  # spmd: --reset

    @property
    def spmd(self) -> bool:
        return self.backend == SPMD

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends to run, in order: the ``--compare`` list, else the one backend (``None`` = default)."""
        return self.compare if self.compare else (self.backend or "",)


def normalize_backend(name: str) -> str:
    """The canonical backend name for ``name``, or a ``LineError`` naming the valid choices."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in (*CHOICES, SPMD):
        raise LineError(f"%%gpurun: unknown backend {name!r}; choose one of {', '.join((*CHOICES, SPMD))}.")
    return key


def rank_spec(text: str) -> tuple[int, ...]:
    """``0``, ``0,2``, ``1-3``, ``0,2-3``: the ranks, in order; a rank named twice is refused."""
    found: list[int] = []
    for part in comma_list(text, "ranks"):
        low, dash, high = part.strip().partition("-")
        try:
            first = non_negative_int(low)
            last = non_negative_int(high) if dash else first
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected ranks such as 0, 0,2 or 1-3, got {text!r}") from None
        if last < first:
            raise argparse.ArgumentTypeError(f"{part!r} counts down; write {last}-{first}")
        twice = [index for index in range(first, last + 1) if index in found]
        if twice:
            raise argparse.ArgumentTypeError(f"rank {twice[0]} is named twice in {text!r}; name each rank once")
        found.extend(range(first, last + 1))
    return tuple(found)


def _shown_ranks(text: str) -> tuple[int, ...]:
    """``--output 0`` (``0,2``, ``1-3``): the ranks whose lines show live; ``-o NAME`` keeps the result."""
    if text.isidentifier():
        raise argparse.ArgumentTypeError(f"takes ranks (0, 0,2 or 1-3), not {text!r}: -o {text} keeps the result")
    return rank_spec(text)


def _group_library(text: str) -> str:
    key = text.strip().lower()
    if key not in GROUP_LIBRARIES:
        raise argparse.ArgumentTypeError(f"expected torch or jax, got {text!r}")
    return key


def repeat_count(text: str) -> int:
    """``--repeat N``: from 1 to ``MOST_REPEATS``."""
    count = positive_int(text)
    if count > MOST_REPEATS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MOST_REPEATS} runs, got {count}; time a longer loop inside the cell instead"
        )
    return count


def spmd_timeout(text: str) -> float:
    """``%%gpurun spmd --timeout``: seconds, as ``%gpucluster --timeout`` takes them (``90``, ``90s``, ``5m``, at
    most 24h); a bare number under 60 was minutes once, so it needs its unit."""
    seconds = timeout_seconds(text)
    if seconds < 60 and text.strip().replace(".", "", 1).isdigit():
        raise argparse.ArgumentTypeError(
            f"a number alone is seconds now (it was minutes): write {text}m for {text} minutes, or {text}s for "
            f"{text} seconds"
        )
    return seconds


FREE_DEVICE = "free"


def _device(text: str) -> int | str:
    """A GPU index, or ``free`` (the freest GPU)."""
    if text.strip().lower() == FREE_DEVICE:
        return FREE_DEVICE
    try:
        return non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a GPU index (0, 1, ...) or free, got {text!r}") from None


def _parser() -> MagicArgumentParser:
    parser = MagicArgumentParser("%%gpurun")
    parser.add_argument("backend", nargs="?")
    parser.add_argument("--device", "-d", type=_device)
    parser.add_argument("--workers", "-w", type=positive_int)
    parser.add_argument("--repeat", "-r", type=repeat_count, default=1)
    parser.add_argument("--compare", "-c")
    parser.add_argument("-o", dest="output", type=variable_name)
    parser.add_argument("--output", dest="show_ranks", type=_shown_ranks)
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("--no-monitor", dest="monitor", action="store_false")
    parser.add_argument("--rtol", type=positive_float, default=1e-3)
    parser.add_argument("--ranks", type=rank_spec)
    parser.add_argument("--init", type=_group_library)
    parser.add_argument("--timeout", type=spmd_timeout)
    parser.add_argument("--reset", action="store_true")
    return parser.described(globals())


_PARSER = _parser()


@functools.lru_cache(maxsize=64)
def parse_run_line(line: str) -> RunOptions:
    """Parse the arguments of ``%%gpurun`` (a notebook repeats a few lines: each is parsed once)."""
    args = _PARSER.parse_line(line)
    backend = normalize_backend(args.backend) if args.backend else None
    compare: tuple[str, ...] = ()
    if args.compare is not None:
        if not args.compare.replace(",", "").strip():
            raise LineError("%%gpurun: --compare needs backends, for example --compare cpu-threads,gpu.")
        try:
            names = comma_list(args.compare, "backends")
        except argparse.ArgumentTypeError as error:
            raise LineError(f"%%gpurun: --compare {error}.") from None
        if [name.strip().lower() for name in names] == [COMPARE_ALL]:
            compare = (COMPARE_ALL,)
        else:
            compare = tuple(normalize_backend(name) for name in names)
        if len(set(compare)) != len(compare):
            raise LineError(f"%%gpurun: --compare lists a backend twice: {args.compare}.")
        if len(compare) == 1 and compare != (COMPARE_ALL,):
            raise LineError(
                f"%%gpurun: --compare needs two backends or more, like --compare {compare[0]},gpu (or --compare "
                f"all); to run on {compare[0]} alone, write %%gpurun {compare[0]}."
            )
        if backend is not None:
            raise LineError("%%gpurun: give either a backend or --compare, not both.")
    options = RunOptions(
        backend=backend,
        device=args.device if isinstance(args.device, int) else None,
        device_free=args.device == FREE_DEVICE,
        workers=args.workers,
        repeat=args.repeat,
        compare=compare,
        output=args.output,
        quiet=args.quiet,
        monitor=args.monitor,
        rtol=args.rtol,
        ranks=args.ranks,
        show_ranks=args.show_ranks,
        init=args.init,
        timeout_s=args.timeout,
        reset=args.reset,
    )
    _check_spmd(options)
    return options


_SPMD_ONLY = (("ranks", None, "--ranks"), ("init", None, "--init"), ("timeout_s", None, "--timeout"),
              ("reset", False, "--reset"), ("show_ranks", None, "--output"))  # fmt: skip
_NOT_SPMD = (
    ("device", None, "--device: each rank computes on its worker's own GPU"),
    ("device_free", False, "--device: each rank computes on its worker's own GPU"),
    ("workers", None, "--workers: every worker of the cluster is a rank (--ranks runs a cell on some)"),
    ("repeat", 1, "--repeat: time the work inside the cell"),
    ("rtol", 1e-3, "--rtol is for --compare"),
)


def _check_spmd(options: RunOptions) -> None:
    """SPMD's options with another backend, and other backends' options with spmd: one line each."""
    if not options.spmd:
        for name, default, flag in _SPMD_ONLY:
            if getattr(options, name) != default:
                raise LineError(f"%%gpurun: {flag} is for spmd cells (%%gpurun spmd {flag} ...).")
        if SPMD in options.compare:
            raise LineError("%%gpurun: --compare runs dask backends; spmd runs a cell on every rank instead.")
        return
    for field_name, unset, why in _NOT_SPMD:
        if getattr(options, field_name) != unset:
            raise LineError(f"%%gpurun spmd: no {why}.")


_CELL_ONLY = (
    (
        "compare",
        (),
        "--compare runs one cell on several backends: put %%gpurun --compare ... on that cell's first line",
    ),
    ("repeat", 1, "--repeat times one cell: put %%gpurun ... --repeat N on that cell's first line"),
    ("output", None, "-o keeps one cell's result: put %%gpurun ... -o NAME on that cell's first line"),
    ("quiet", False, "-q is how plain cells run already: %gpurun BACKEND shows no summary"),
    ("monitor", True, "plain cells show no live panel: --no-monitor is for %%gpurun cells"),
    ("rtol", 1e-3, "--rtol is for %%gpurun --compare cells"),
)


def parse_session_line(line: str) -> RunOptions:
    """The options of ``%gpurun BACKEND`` as a line: a backend, ``--device``, ``--workers``; a one-line
    ``LineError`` for what only a cell can use."""
    options = parse_run_line(line)
    for name, default, why in _CELL_ONLY:
        if getattr(options, name) != default:
            raise LineError(f"%gpurun: {why}.")
    if options.backend is None:
        raise LineError(
            "%gpurun: name the backend for plain cells (cpu-single, cpu-threads, gpu, multi-gpu or auto), or off."
        )
    return options

"""Parsing the ``%%gpurun`` line into a frozen ``RunOptions``; every bad input is a one-line ``UsageError``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from IPython.core.error import UsageError

from gpu_magics.argparsing import (
    MagicArgumentParser,
    comma_list,
    non_negative_int,
    positive_float,
    positive_int,
)

BACKENDS: tuple[str, ...] = ("cpu-single", "cpu-threads", "gpu", "multi-gpu")
CHOICES: tuple[str, ...] = (*BACKENDS, "auto")
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

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends to run, in order: the ``--compare`` list, else the one backend (``None`` = default)."""
        return self.compare if self.compare else (self.backend or "",)


def normalize_backend(name: str) -> str:
    """The canonical backend name for ``name``, or a ``UsageError`` naming the valid choices."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in CHOICES:
        raise UsageError(f"%%gpurun: unknown backend {name!r}; choose one of {', '.join(CHOICES)}.")
    return key


def _identifier(text: str) -> str:
    if not text.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid Python name")
    return text


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
    parser.add_argument("--repeat", "-r", type=positive_int, default=1)
    parser.add_argument("--compare", "-c")
    parser.add_argument("-o", "--output", type=_identifier)
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("--no-monitor", dest="monitor", action="store_false")
    parser.add_argument("--rtol", type=positive_float, default=1e-3)
    return parser


_PARSER = _parser()


def parse_run_line(line: str) -> RunOptions:
    """Parse the arguments of ``%%gpurun``."""
    args = _PARSER.parse_line(line)
    backend = normalize_backend(args.backend) if args.backend else None
    compare: tuple[str, ...] = ()
    if args.compare is not None:
        if not args.compare.replace(",", "").strip():
            raise UsageError("%%gpurun: --compare needs backends, for example --compare cpu-threads,gpu.")
        try:
            names = comma_list(args.compare, "backends")
        except argparse.ArgumentTypeError as error:
            raise UsageError(f"%%gpurun: --compare {error}.") from None
        if [name.strip().lower() for name in names] == [COMPARE_ALL]:
            compare = (COMPARE_ALL,)
        else:
            compare = tuple(normalize_backend(name) for name in names)
        if len(set(compare)) != len(compare):
            raise UsageError(f"%%gpurun: --compare lists a backend twice: {args.compare}.")
        if backend is not None:
            raise UsageError("%%gpurun: give either a backend or --compare, not both.")
    return RunOptions(
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
    )

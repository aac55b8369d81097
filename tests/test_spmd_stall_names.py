"""Naming the collective a stalled rank waits in, at any number of ranks: torch's flight recorder of the group's
backend (NCCL's own for an NCCL group, the CPU one for gloo), its entries as torch writes them, and the row's words
where the recorder cannot name it (why, rather than a bare "collective"). The real gloo case with four ranks:
tests/test_spmd_interrupts.py."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from gpu_magics.spmd.kernel.view.stalls import describe
from gpu_magics.spmd.rank import collectives

pytest.importorskip("torch")


def entry(seq: int, name: str = "nccl:all_reduce", **fields: Any) -> dict[str, Any]:
    """One flight-recorder entry, with the fields torch writes (2.8 on)."""
    return {
        "record_id": seq,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "profiling_name": name,
        "state": "scheduled",
        "retired": False,
        "is_p2p": False,
        **fields,
    }


def answer(seq: int, pending: dict[str, Any] | None = None, text: str = "idle") -> dict[str, Any]:
    group: dict[str, Any] = {"backend": "nccl", "seq": seq, "aborted": False}
    if pending:
        group["pending"] = pending
    return {"text": text, "collective": group}


def test_the_first_unfinished_collective_of_the_current_default_group_is_named() -> None:
    entries = [
        entry(1, state="completed", retired=True),
        entry(2, pg_id=0, retired=True),  # a group aborted and made again: its stuck collective retired
        entry(1, pg_id=1, state="completed"),
        entry(2, "nccl:broadcast", pg_id=1),
        entry(3, "nccl:all_gather", pg_id=1),
        entry(1, "nccl:all_reduce", pg_id=2, process_group=("1", "sub")),  # another group's own numbering
        entry(7, "nccl:send", pg_id=1, is_p2p=True),
    ]
    assert collectives.first_unfinished(entries) == {"name": "broadcast", "seq": 2}
    assert collectives.first_unfinished([entry(4, "gloo:barrier", process_group=None)]) == {"name": "barrier", "seq": 4}
    assert collectives.first_unfinished([entry(1, state="completed")]) is None


def fake_recorders(monkeypatch: pytest.MonkeyPatch, **recorders: list[dict[str, Any]] | None) -> None:
    """torch's recorders as ``_dump_nccl_trace`` / ``_dump_fr_trace`` give them (``None``: the function is absent)."""
    import torch

    c10d = torch._C._distributed_c10d
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        if hasattr(c10d, name):
            monkeypatch.delattr(c10d, name)
    for name, entries in recorders.items():
        if entries is not None:
            data = pickle.dumps({"version": "2.10", "entries": entries})
            monkeypatch.setattr(c10d, f"_dump_{name}_trace", lambda *_, data=data: data, raising=False)


def test_an_nccl_group_reads_nccls_own_recorder_and_gloo_the_cpu_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.8 on has both; the CPU one knows nothing of NCCL's collectives (the row then said only
    "collective #2 (NCCL)", at any number of ranks)."""
    fake_recorders(monkeypatch, nccl=[entry(2, "nccl:all_reduce")], fr=[entry(5, "gloo:barrier")])
    assert collectives.recorded_wait("nccl") == ({"name": "all_reduce", "seq": 2}, "")
    assert collectives.recorded_wait("gloo") == ({"name": "barrier", "seq": 5}, "")
    fake_recorders(monkeypatch, nccl=[entry(2)])  # a torch before 2.8: NCCL's recorder only
    assert collectives.recorded_wait("nccl") == ({"name": "all_reduce", "seq": 2}, "")


def test_where_the_recorder_cannot_name_it_it_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_recorders(monkeypatch)
    assert collectives.recorded_wait("nccl") == (None, "this torch has no flight recorder")
    fake_recorders(monkeypatch, nccl=[], fr=[])
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    assert collectives.recorded_wait("nccl") == (
        None,
        "torch's flight recorder holds no unfinished collective of this group",
    )
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")
    assert collectives.recorded_wait("nccl") == (
        None,
        "torch's flight recorder is off (TORCH_NCCL_TRACE_BUFFER_SIZE=0)",
    )


def test_four_ranks_the_collective_named_or_why_not() -> None:
    after = "waiting for the GPU after the cell"
    named = {0: answer(2, {"name": "all_reduce", "seq": 2}, after), 1: answer(1), 2: answer(1), 3: answer(1)}
    assert describe(0, named) == f"all_reduce #2 (NCCL) waits for ranks 1-3, which never entered it ({after})"
    why = "torch's flight recorder is off (TORCH_FR_BUFFER_SIZE=0)"
    guessed = {"name": "collective", "seq": 2, "guess": True, "unnamed": why}
    unnamed = {**named, 0: answer(2, guessed, after)}
    assert describe(0, unnamed) == (
        f"collective #2 (NCCL) waits for ranks 1-3, which never entered it ({after}; which collective is not known: "
        f"{why})"
    )
    in_step = {rank: answer(2, guessed if rank == 0 else None, after if rank == 0 else "idle") for rank in range(4)}
    assert describe(0, in_step) == after  # every rank entered as many: plain GPU work, no collective named

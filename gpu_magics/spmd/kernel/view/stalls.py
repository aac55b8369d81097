"""Words for a rank that makes no progress: the collective it waits in and the ranks that never entered it, from
every rank's answer to "where are you" (its stack in words and its process group's state: how many collectives it
entered, the one it waits in). Pure functions, tested without ranks.

``all_reduce #12 (NCCL) waits for rank 1, which never entered it (cell line 5)``; where the flight recorder cannot
name the collective, its number and why: ``collective #2 (NCCL) waits for ranks 1-3, which never entered it
(waiting for the GPU after the cell; which collective is not known: torch's flight recorder is off ...)``
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_magics.spmd.kernel.view.output import rank_list
from gpu_magics.spmd.messages import Collective, Where

BACKENDS = {"nccl": "NCCL", "gloo": "gloo", "mpi": "MPI", "ucc": "UCC"}


def describe(rank: int, answers: Mapping[int, Where]) -> str:
    """Where ``rank`` waits, in words, given every rank's answer (rank -> ``{"text", "collective"}``)."""
    own = answers.get(rank)
    text = "" if own is None else own["text"]
    group: Collective = (None if own is None else own.get("collective")) or {}
    pending = group.get("pending")
    if not pending:
        return text
    number = int(pending.get("seq", 0))
    backend = BACKENDS.get(str(group.get("backend", "")), str(group.get("backend", "")))
    head = f"{pending.get('name', 'collective')} #{number} ({backend})"
    entered: dict[int, int] = {}
    for other, answer in answers.items():
        seq = (answer.get("collective") or {}).get("seq") if other != rank else None
        if seq is not None:
            entered[other] = int(seq)
    behind = sorted(other for other, seq in entered.items() if seq < number)
    if pending.get("guess") and not behind:  # no recorder: only a rank that is behind tells a collective waits
        return text
    if behind:
        many = len(behind) > 1
        words = f"{head} waits for rank{'s' * many} {rank_list(behind)}, which never entered it"
    elif entered and len(entered) == len(answers) - 1:
        words = f"waits in {head}, which every rank entered"
    else:
        words = f"waits in {head}"
    where = _cell_line(text)
    if pending.get("guess") and pending.get("unnamed"):  # only its number is known: why it has no name
        where = "; ".join(filter(None, [where, f"which collective is not known: {pending['unnamed']}"]))
    return f"{words} ({where})" if where else words


def _cell_line(text: str) -> str:
    """The part of a rank's "where" that says where the cell is (``cell line 5``), or that its code ended."""
    if "waiting for the GPU" in text:
        return text
    return next((part.strip() for part in text.split(", ") if part.strip().startswith("cell line")), "")

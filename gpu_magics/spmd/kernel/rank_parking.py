"""In the kernel: this kernel's SPMD ranks in a park of the cluster in use (``%gpucluster park``). Before the driver
checkpoints their processes, each rank ends its torch process group and copies its tensors' GPU memory to host memory
itself (``rank.parking``); after the resume restored them, it copies the data back, and the next SPMD cell makes the
group again in the same processes (``Ranks.remake``: said in one line, variables kept; what holds the old group, a
DDP model, is made again by the user, as after an interrupt). A rank's own commands go to its idle main thread.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, cast

from gpu_magics.spmd.messages import HeldCommand, ParkCommand
from gpu_magics.text.errors import RankError

TIMEOUT_S = 120.0  # a rank's copies of a large model take seconds; one that does not answer fails the park


class RankPark:
    """This kernel's ranks (``made``: its ``Ranks``) as a park sees them (``queries.rank_park``)."""

    def __init__(self, made: Any) -> None:
        self.made = made

    @property
    def busy(self) -> bool:
        """An SPMD cell runs on them now (a park waits for none)."""
        return bool(self.made.busy)

    def parkable(self, simulated: bool) -> dict[str, int]:
        """The ranks a park takes (``rank 0`` -> pid): those with a GPU (all where the GPUs are simulated), while
        their processes run."""
        world = self.made.world
        if world is None:
            return {}
        pids = dict(self.made.pids)
        taken = [rank.rank for rank in world.ranks if (rank.gpu or simulated) and rank.rank in pids]
        return {f"rank {index}": pids[index] for index in taken}

    def planned(self, names: dict[str, int]) -> int:
        """The host memory the ranks' copies need."""
        return sum(int(figures.get("bytes", 0)) for figures in self._ask_all(names, "plan-park").values())

    def offload(self, names: dict[str, int]) -> dict[str, dict[str, Any]]:
        """Each rank ends its group and moves its GPU data to host memory; its figures by name. A torch group ended
        here is made again at the next SPMD cell."""
        answers = self._ask_all(names, "park")
        if any(figures.get("group") for figures in answers.values()) and "torch" not in self.made.remake:
            self.made.groups.discard("torch")
            self.made.remake.append("torch")
        return answers

    def held(self) -> dict[int, tuple[list[dict[str, Any]], dict[str, int], int | None]]:
        """What each rank's variables hold on GPUs, by rank (``%gpumemory``), with its pools' figures and its
        process's pid; a rank that does not answer is left out."""
        world = self.made.world
        if world is None or self.busy:
            return {}
        futures = self.made.ask_each(list(world.ranks), cast(HeldCommand, {"op": "held"}))
        found: dict[int, tuple[list[dict[str, Any]], dict[str, int], int | None]] = {}
        for index, future in futures.items():
            try:
                reply = next(iter(future.result(TIMEOUT_S).values()))
            except (concurrent.futures.TimeoutError, OSError, RuntimeError):
                continue
            if not isinstance(reply, BaseException) and reply.get("ok"):
                pools = {str(k): int(v) for k, v in (reply.get("pools") or {}).items()}
                found[index] = (list(reply.get("held") or []), pools, self.made.pids.get(index))
        return found

    def reload(self, names: dict[str, int]) -> dict[str, dict[str, Any]]:
        """Each rank copies back what its park moved."""
        return self._ask_all(names, "unpark")

    def _ask_all(self, names: dict[str, int], op: str) -> dict[str, dict[str, Any]]:
        """``op`` on every rank of ``names`` at once; the figures by name, or a ``RankError`` naming the ranks that
        failed."""
        wanted = {int(name.split()[-1]) for name in names}
        ranks = [rank for rank in self.made.world.ranks if rank.rank in wanted]
        futures = self.made.ask_each(ranks, cast(ParkCommand, {"op": op}))
        figures: dict[str, dict[str, Any]] = {}
        failed: list[str] = []
        for index, future in futures.items():
            try:
                reply = next(iter(future.result(TIMEOUT_S).values()))
            except (concurrent.futures.TimeoutError, OSError, RuntimeError) as error:
                failed.append(f"rank {index}: {type(error).__name__}: {error}")
                continue
            if isinstance(reply, BaseException):
                failed.append(f"rank {index}: {type(reply).__name__}: {reply}")
            elif not reply.get("ok"):
                said = reply.get("error") or {}
                why = f"{said.get('type')}: {said.get('message')}" if said else "its process ended"
                failed.append(f"rank {index}: {why}")
            else:
                figures[f"rank {index}"] = dict(reply.get("parked") or {})
        if failed:
            raise RankError("; ".join(failed))
        return figures

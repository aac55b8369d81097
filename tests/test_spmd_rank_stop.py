"""Stopping a rank's cell the moment it was sent (the other rank failed at once): the rank stops at its cell's first
line instead of ignoring the interrupt and being ended after the grace period, and a stop that reaches the worker
before the cell's message means the cell never runs. A real rank process, driven as its worker drives it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gpu_magics.spmd.messages import NEVER_RAN, Reply, RunCommand
from gpu_magics.spmd.worker.rank_process import RankProcess

pytestmark = pytest.mark.timeout(120)


class EventLog:
    """The worker's event log, as the rank process uses it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def log_event(self, topic: str, message: Any) -> None:
        self.events.append((topic, message))


def run_command(code: str, cell: str) -> RunCommand:
    return {"op": "run", "code": code, "name": cell, "cell": cell, "gpu_wait_s": 5.0}


def interrupted(reply: Reply) -> bool:
    return reply.get("error") is not None and bool(reply["error"].get("interrupted")) and not reply.get("ended")


async def stop_each_cell_as_it_is_sent(rounds: int) -> list[tuple[bool, Reply]]:
    made = RankProcess("owner", "topic", {"RANK": "0", "WORLD_SIZE": "1"}, EventLog())
    try:
        await made.ready
        outcomes = []
        for index in range(rounds):
            cell = f"<rank cell {index}>"
            asked = asyncio.ensure_future(made.ask(run_command("import time\ntime.sleep(30)", cell)))
            await asyncio.sleep(0)  # the message is written; the rank has not taken it yet
            ended = await made.stop(10.0, cell)
            outcomes.append((ended, await asked))
        after = await made.ask(run_command("6 * 7", "<rank cell last>"))
        assert after["error"] is None and after["repr"] == "42"  # the same process goes on
        return outcomes
    finally:
        await made.kill()


def test_a_cell_stopped_as_it_is_sent_stops_at_once_and_its_process_lives() -> None:
    outcomes = asyncio.run(stop_each_cell_as_it_is_sent(5))
    assert [ended for ended, _ in outcomes] == [False] * 5
    assert all(interrupted(reply) for _, reply in outcomes), outcomes
    assert all(reply["seconds"] < 5 for _, reply in outcomes), outcomes


async def stop_before_the_message(marker: Path) -> tuple[bool, Reply, bool, Reply]:
    made = RankProcess("owner", "topic", {"RANK": "0", "WORLD_SIZE": "1"}, EventLog())
    try:
        await made.ready
        ended = await made.stop(1.0, "<rank cell 1>")
        code = f"open({str(marker)!r}, 'w').close()"
        skipped = await made.ask(run_command(code, "<rank cell 1>"))
        ran_then = marker.exists()
        ran = await made.ask(run_command(code + "\n'ran'", "<rank cell 2>"))
        return ended, skipped, ran_then, ran
    finally:
        await made.kill()


def test_a_stop_that_comes_before_its_cell_means_the_cell_never_runs_there(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ended, skipped, ran_then, ran = asyncio.run(stop_before_the_message(marker))
    assert not ended
    assert interrupted(skipped) and skipped["error"]["message"] == NEVER_RAN and not ran_then
    assert ran["error"] is None and ran["repr"] == "'ran'" and marker.exists()  # the next cell runs

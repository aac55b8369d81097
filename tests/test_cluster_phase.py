"""The kernel's cluster as one object with a phase: each transition it allows and each it refuses, decisions taken
on the owner thread from several threads at once, and a real start racing a stop from another thread ending in one
phase that both agree on."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, cast

import pytest

from gpu_magics.cluster.background.closing import Closing
from gpu_magics.cluster.background.starting import Starting
from gpu_magics.cluster.control import kernel_cluster, lifecycle, owner
from gpu_magics.cluster.control.kernel_cluster import KernelCluster, Phase, PhaseRefused
from gpu_magics.cluster.options import parse_cluster_line
from gpu_magics.cluster.reading.running import ActiveCluster


def on_owner(action: Callable[..., Any], *args: Any) -> Any:
    return owner.change(functools.partial(action, *args))


def handle(verb: str = "starting") -> Starting:
    return Starting("%gpucluster", "phase", 1, verb=verb)


def a_cluster() -> ActiveCluster:
    """The object the phase holds (the phase only keeps it and compares it)."""
    return cast(ActiveCluster, object())


def started(kc: KernelCluster) -> tuple[Starting, ActiveCluster]:
    start, cluster = handle(), a_cluster()
    assert on_owner(kc.begin_start, start, on_owner(kc.view))
    assert on_owner(kc.take_into_use, start, cluster)
    assert on_owner(kc.start_ready, start)
    return start, cluster


def test_a_start_a_change_and_a_stop_go_through_their_phases() -> None:
    kc = KernelCluster()
    assert kc.phase is Phase.IDLE
    start, cluster = handle(), a_cluster()
    assert on_owner(kc.begin_start, start, on_owner(kc.view))
    assert (kc.phase, kc.pending, kc.cluster) == (Phase.STARTING, start, None)
    assert on_owner(kc.take_into_use, start, cluster)
    assert (kc.phase, kc.cluster) == (Phase.STARTING, cluster)  # in use while its workers come
    assert on_owner(kc.start_ready, start)
    assert (kc.phase, kc.pending, kc.cluster) == (Phase.IN_USE, None, cluster)
    change = handle("restarting")
    on_owner(kc.begin_change, change, cluster)
    assert (kc.phase, kc.pending) == (Phase.CHANGING, change)
    assert on_owner(kc.change_ended, change)
    assert (kc.phase, kc.pending) == (Phase.IN_USE, None)
    claim = on_owner(kc.claim_stop)
    assert (claim.cluster, claim.start, claim.during) == (cluster, None, None)
    assert (kc.phase, kc.cluster) == (Phase.CLOSING, None)
    closing = Closing(lambda: "closed", lambda error: "failed", here=True)
    on_owner(kc.closing, closing)
    on_owner(kc.wound_down, closing)
    assert kc.phase is Phase.IDLE and kc.winding is None


def test_a_start_is_refused_while_one_runs_or_starts_and_a_change_needs_a_cluster_in_use() -> None:
    kc = KernelCluster()
    with pytest.raises(PhaseRefused, match="refused while the cluster is idle"):
        on_owner(kc.begin_change, handle("scaling"), None)
    start = handle()
    assert on_owner(kc.begin_start, start, on_owner(kc.view))
    with pytest.raises(PhaseRefused, match="refused while the cluster is starting"):
        on_owner(kc.begin_start, handle(), on_owner(kc.view))
    with pytest.raises(PhaseRefused):
        on_owner(kc.begin_change, handle("scaling"), None)  # the cluster starting is not yet in use
    cluster = a_cluster()
    assert on_owner(kc.take_into_use, start, cluster) and on_owner(kc.start_ready, start)
    with pytest.raises(PhaseRefused, match="refused while the cluster is in use"):
        on_owner(kc.begin_start, handle(), on_owner(kc.view))
    with pytest.raises(PhaseRefused, match="no longer in use"):
        on_owner(kc.begin_change, handle("scaling"), a_cluster())  # another cluster than the one in use
    change = handle("scaling")
    on_owner(kc.begin_change, change, cluster)
    with pytest.raises(PhaseRefused, match="scaling already"):
        on_owner(kc.begin_change, handle("restarting"), cluster)
    assert kc.phase is Phase.CHANGING and kc.pending is change  # a refusal changes nothing


def test_a_start_decided_from_an_old_view_is_refused_so_the_verb_looks_again() -> None:
    kc = KernelCluster()
    seen = on_owner(kc.view)
    started(kc)
    on_owner(kc.claim_stop)
    on_owner(kc.wound_down)
    assert kc.phase is Phase.IDLE  # the same phase as in ``seen``, but things happened since
    assert not on_owner(kc.begin_start, handle(), seen)
    assert kc.phase is Phase.IDLE
    assert on_owner(kc.begin_start, handle(), on_owner(kc.view))


def test_a_stop_during_a_start_ends_it_and_the_start_cannot_take_its_cluster_or_be_ready() -> None:
    kc = KernelCluster()
    start = handle()
    on_owner(kc.begin_start, start, on_owner(kc.view))
    claim = on_owner(kc.claim_stop)
    assert claim.start is start and claim.cluster is None
    assert (kc.phase, kc.winding) == (Phase.CLOSING, start)
    assert not on_owner(kc.take_into_use, start, a_cluster())
    assert not on_owner(kc.start_ready, start)
    assert kc.cluster is None
    on_owner(kc.start_ended, start, False)  # its job ended as stopped: what it made is closed
    assert kc.phase is Phase.IDLE and kc.failed is None


def test_a_stop_during_a_change_closes_the_cluster_and_the_change_ends_as_stopped() -> None:
    kc = KernelCluster()
    _, cluster = started(kc)
    change = handle("restarting")
    on_owner(kc.begin_change, change, cluster)
    claim = on_owner(kc.claim_stop)
    assert (claim.cluster, claim.during) == (cluster, change)
    assert not on_owner(kc.change_ended, change)
    assert kc.phase is Phase.CLOSING


def test_a_failed_start_is_kept_until_said_and_a_stop_lets_it_go() -> None:
    kc = KernelCluster()
    start = handle()
    on_owner(kc.begin_start, start, on_owner(kc.view))
    on_owner(kc.start_ended, start, True)
    assert (kc.phase, kc.pending, kc.failed) == (Phase.IDLE, None, start)
    assert on_owner(kc.claim_stop) == kernel_cluster.StopClaim()
    assert kc.failed is None


def test_a_stop_for_another_cluster_stops_nothing_and_keep_may_refuse_before_anything_changes() -> None:
    kc = KernelCluster()
    _, cluster = started(kc)
    assert on_owner(kc.claim_stop, a_cluster()) == kernel_cluster.StopClaim()
    assert kc.phase is Phase.IN_USE

    def refuse(_: ActiveCluster) -> None:
        raise ValueError("only a gateway cluster outlives its kernel")

    with pytest.raises(ValueError, match="outlives"):
        on_owner(kc.claim_stop, None, refuse)
    assert (kc.phase, kc.cluster) == (Phase.IN_USE, cluster)


def test_a_close_that_ends_after_a_new_start_began_leaves_the_new_start_alone() -> None:
    kc = KernelCluster()
    started(kc)
    on_owner(kc.claim_stop)
    slow = Closing(lambda: "closed", lambda error: "failed", here=True)
    on_owner(kc.closing, slow)
    start = handle()
    assert on_owner(kc.begin_start, start, on_owner(kc.view))  # it waited for the close as long as it would
    on_owner(kc.wound_down, slow)
    assert (kc.phase, kc.pending) == (Phase.STARTING, start)


def test_of_many_threads_beginning_a_start_from_one_view_exactly_one_wins() -> None:
    kc = KernelCluster()
    seen = on_owner(kc.view)
    results: list[bool] = []
    gate = threading.Barrier(8)

    def race() -> None:
        gate.wait(10)
        results.append(on_owner(kc.begin_start, handle(), seen))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False] * 7 + [True]
    assert kc.phase is Phase.STARTING


def test_starts_and_stops_racing_from_many_threads_always_leave_one_consistent_phase() -> None:
    kc = KernelCluster()
    gate = threading.Barrier(6)

    def starter() -> None:
        gate.wait(10)
        for _ in range(40):
            start, seen = handle(), on_owner(kc.view)
            if seen.phase not in (Phase.IDLE, Phase.CLOSING):  # something runs: a verb would reuse or stop it
                continue
            if on_owner(kc.begin_start, start, seen) and on_owner(kc.take_into_use, start, a_cluster()):
                on_owner(kc.start_ready, start)

    def stopper() -> None:
        gate.wait(10)
        for _ in range(40):
            claim = on_owner(kc.claim_stop)
            if claim.start is not None:
                on_owner(kc.start_ended, claim.start, False)
            on_owner(kc.wound_down)

    def consistent() -> bool:
        return {
            Phase.IDLE: kc.cluster is None and kc.pending is None,
            Phase.STARTING: kc.pending is not None,
            Phase.IN_USE: kc.cluster is not None and kc.pending is None,
            Phase.CHANGING: kc.cluster is not None and kc.pending is not None,
            Phase.CLOSING: kc.cluster is None and kc.pending is None,
        }[kc.phase]

    seen: list[bool] = []
    threads = [threading.Thread(target=target) for target in (starter, starter, starter, stopper, stopper, stopper)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        seen.append(owner.change(consistent))
    for thread in threads:
        thread.join(60)
    seen.append(owner.change(consistent))
    assert all(seen) and len(seen) > 1


@pytest.mark.slow  # a real cluster with a worker process
def test_a_real_start_racing_a_stop_from_another_thread_ends_in_one_phase() -> None:
    options = parse_cluster_line("--cpu-workers 1 --name racing")
    start = lifecycle.begin(options, telemetry_interval=0, background=True)
    said: list[str] = []
    stopper = threading.Thread(target=lambda: said.append(lifecycle.stop()), name="a-stopping-thread")
    stopper.start()
    stopper.join(60)
    start.finished.wait(60)
    assert lifecycle.wait_wound_down(60)
    assert said and said[0].startswith("%gpucluster: stopped")
    assert kernel_cluster.phase() is Phase.IDLE
    assert kernel_cluster.in_use() is None and kernel_cluster.under_way() is None
    # the stop came first (its job ends as stopped, or fails on what the stop closed), or just after it was ready
    assert start.progress().phase in ("stopped", "failed", "ready")
    assert lifecycle.stop() == lifecycle.NO_CLUSTER

"""The kernel's cluster as a pure machine: every row of its table, every (phase, event) pair it refuses, the log of
the events it met, all without a thread; then events posted to the owner from many threads at once, and a real
start racing a stop from another thread ending in one phase that both agree on."""

from __future__ import annotations

import functools
import threading
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from gpu_magics.cluster.background.closing import Closing
from gpu_magics.cluster.background.starting import Starting
from gpu_magics.cluster.control import kernel_cluster, owner
from gpu_magics.cluster.control.machine.events import (
    AdaptAsked,
    CancelStart,
    ChangeAsked,
    ChangeEnded,
    CloseBegan,
    CloseCluster,
    CloseEnded,
    Event,
    FreeAsked,
    IdleFor,
    Instruction,
    JoinPark,
    JoinResume,
    KeepRefused,
    LookAgain,
    ParkAsked,
    ParkIdle,
    Refused,
    ResumeAsked,
    ResumeFailed,
    ResumeFirst,
    ResumeWorkers,
    SchedulerAnswered,
    StartAsked,
    StartEnded,
    StartReady,
    StopAsked,
    StopServices,
    SwapService,
    TakeIntoUse,
    TellListeners,
    WatchAgain,
    WorkersMoved,
    WorkersReady,
    accepted,
)
from gpu_magics.cluster.control.machine.phase import Phase, PhaseRefused
from gpu_magics.cluster.control.machine.table import TABLE, KernelCluster, describe, require
from gpu_magics.cluster.control.verbs import start, stop
from gpu_magics.cluster.options import parse_cluster_line
from gpu_magics.cluster.reading.running import ActiveCluster, Parked, Role, Service


def handle(verb: str = "starting") -> Starting:
    return Starting("%gpucluster", "phase", 1, verb=verb)


class HeldCluster(SimpleNamespace):
    """What the machine holds of a cluster: it keeps it, compares it, reads whether it may be kept, and attaches and
    detaches what runs beside it."""

    def services(self) -> list[Service]:
        return ActiveCluster.services(cast(ActiveCluster, self))


def a_cluster(keepable: bool = False) -> ActiveCluster:
    return cast(ActiveCluster, HeldCluster(parked=None, manager=SimpleNamespace(keepable=keepable), attached={}))


class Beside:
    """A service beside a cluster: the machine attaches and detaches it and says when to stop it; it never calls it."""

    def stop(self) -> None:
        raise AssertionError("the machine itself never stops a service")


class Watch:
    """An idle watch: the machine keeps it and hands it back; it never calls it."""

    def again(self) -> None:
        raise AssertionError("the machine itself never calls a watch")


def a_closing() -> Closing:
    return Closing(lambda: "closed", lambda error: "failed", here=True)


def machine_in(phase: Phase) -> KernelCluster:
    """A machine brought to ``phase`` by its own events."""
    kc = KernelCluster()
    if phase is Phase.IDLE:
        return kc
    start, cluster = handle(), a_cluster()
    assert kc.handle(StartAsked(start, kc.generation)) == []
    if phase is Phase.CLOSING:
        kc.handle(StopAsked())
    if phase in (Phase.STARTING, Phase.CLOSING):
        return kc
    kc.handle(SchedulerAnswered(start, cluster))
    kc.handle(WorkersReady(start))
    if phase is Phase.CHANGING:
        kc.handle(ChangeAsked(handle("scaling"), cluster))
    if phase is Phase.PARKED:
        kc.handle(ParkAsked(cluster))
    assert kc.phase is phase
    return kc


def one_of_each(kc: KernelCluster) -> list[Event]:
    """An event of every type, about what ``kc`` holds now."""
    start, cluster = kc.pending or handle(), kc.cluster or a_cluster()
    return [
        StartAsked(handle(), kc.generation),
        SchedulerAnswered(start, cluster),
        WorkersReady(start),
        StartEnded(start, failed=False),
        ChangeAsked(handle("scaling"), cluster),
        ChangeEnded(start),
        ParkAsked(cluster),
        WorkersMoved(cluster),
        ResumeAsked(cluster, Future()),
        ResumeFailed(cluster),
        IdleFor(cluster, Watch()),
        AdaptAsked(cluster),
        FreeAsked(cluster),
        StopAsked(),
        CloseBegan(a_closing()),
        CloseEnded(),
        SwapService(cluster, Role.IDLE_TIMEOUT, None),
    ]


def test_every_event_type_is_one_of_each() -> None:
    assert {type(event) for event in one_of_each(KernelCluster())} == set(Event.__subclasses__())


@pytest.mark.parametrize("phase", list(Phase))
def test_every_pair_the_table_lacks_is_refused_and_changes_nothing(phase: Phase) -> None:
    kc = machine_in(phase)
    for event in one_of_each(kc):
        if (phase, type(event)) in TABLE:
            continue
        before = kc.view()
        instructions = kc.handle(event)
        assert instructions == [Refused(f"{event.what}: refused while the cluster is {phase.value}")]
        assert kc.view() == before


def test_a_start_a_change_and_a_stop_go_through_their_phases() -> None:
    kc = KernelCluster()
    start, cluster = handle(), a_cluster()
    assert kc.handle(StartAsked(start, kc.generation)) == []
    assert (kc.phase, kc.pending, kc.cluster) == (Phase.STARTING, start, None)
    assert kc.handle(SchedulerAnswered(start, cluster)) == [TellListeners(cluster), TakeIntoUse(start, cluster)]
    assert (kc.phase, kc.cluster) == (Phase.STARTING, cluster)  # in use while its workers come
    assert kc.handle(WorkersReady(start, 2.5)) == [StartReady(start, cluster, 2.5)]
    assert (kc.phase, kc.pending, kc.cluster) == (Phase.IN_USE, None, cluster)
    change = handle("restarting")
    assert kc.handle(ChangeAsked(change, cluster)) == []
    assert (kc.phase, kc.pending) == (Phase.CHANGING, change)
    assert kc.handle(ChangeEnded(change)) == []
    assert (kc.phase, kc.pending) == (Phase.IN_USE, None)
    assert kc.handle(StopAsked()) == [CloseCluster(cluster, None), TellListeners(None)]
    assert (kc.phase, kc.cluster) == (Phase.CLOSING, None)
    closing = a_closing()
    assert kc.handle(CloseBegan(closing)) == [] and kc.winding is closing
    assert kc.handle(CloseBegan(a_closing())) == [Refused("closing: a close is under way already")]
    assert kc.handle(CloseEnded(closing)) == []
    assert kc.phase is Phase.IDLE and kc.winding is None


def test_a_park_and_a_resume_go_through_their_phases() -> None:
    kc = machine_in(Phase.IN_USE)
    cluster = kc.cluster
    assert cluster is not None
    assert kc.handle(ParkAsked(a_cluster())) == [Refused("parking: the cluster it parks is no longer in use")]
    asked = ParkAsked(cluster)
    assert kc.handle(asked) == [] and kc.phase is Phase.PARKED
    resuming: Future[None] = Future()  # asked while the park is under way: it waits for the park, then asks again
    assert kc.handle(ResumeAsked(cluster, resuming)) == [JoinPark(asked.done)] and kc.resuming is None
    held = Parked({"w": 1}, 10, 0.0)
    assert kc.handle(WorkersMoved(cluster, held)) == []
    assert (kc.phase, cluster.parked, kc.parking) == (Phase.PARKED, held, None)
    assert kc.handle(WorkersMoved(a_cluster())) == [Refused("moving the workers: the cluster is no longer in use")]
    assert kc.handle(WorkersMoved(cluster)) == []
    assert (kc.phase, cluster.parked) == (Phase.IN_USE, None)
    kc.handle(ParkAsked(cluster))
    assert kc.handle(StopAsked()) == [CloseCluster(cluster, None), TellListeners(None)]  # parked: closed too


def test_a_parked_cluster_asked_to_stop_or_change_resumes_first() -> None:
    kc = machine_in(Phase.PARKED)
    cluster = kc.cluster
    assert cluster is not None
    change = handle("restarting")
    assert kc.handle(ChangeAsked(change, cluster)) == [
        Refused("beginning a change: refused while the cluster is parked")
    ]
    kc.handle(WorkersMoved(cluster, Parked({"w": 1}, 10, 0.0)))  # its workers parked
    assert kc.handle(ChangeAsked(change, a_cluster())) == [
        Refused("beginning a change: the cluster it changes is no longer in use")
    ]
    assert kc.handle(ChangeAsked(change, cluster)) == [ResumeFirst(cluster)] and kc.phase is Phase.PARKED
    assert kc.handle(StopAsked(only=a_cluster())) == []  # another cluster: nothing
    assert kc.handle(StopAsked()) == [ResumeFirst(cluster)] and kc.phase is Phase.PARKED
    assert kc.handle(StopAsked(resumed=True)) == [CloseCluster(cluster, None), TellListeners(None)]  # tried: closed


@pytest.mark.parametrize("asked", [AdaptAsked, FreeAsked])
def test_adapt_and_free_ask_the_workers_of_the_cluster_in_use_and_a_parked_one_resumes_first(
    asked: type[AdaptAsked | FreeAsked],
) -> None:
    for phase in (Phase.STARTING, Phase.IN_USE, Phase.CHANGING, Phase.PARKED):
        kc = machine_in(phase)
        cluster = kc.cluster or a_cluster()
        if phase is Phase.STARTING:
            assert not accepted(kc.handle(asked(cluster)))  # not yet in use
            assert kc.pending is not None
            kc.handle(SchedulerAnswered(kc.pending, cluster))
        assert kc.handle(asked(cluster)) == []  # a park under way: its workers not yet parked
        assert kc.handle(asked(a_cluster())) == [Refused(f"{asked.what}: the cluster is no longer in use")]
        assert kc.phase is phase
    kc = machine_in(Phase.PARKED)
    assert kc.cluster is not None
    kc.handle(WorkersMoved(kc.cluster, Parked({"w": 1}, 10, 0.0)))
    assert kc.handle(asked(kc.cluster)) == [ResumeFirst(kc.cluster)] and kc.phase is Phase.PARKED


def test_one_resume_at_a_time_and_who_asks_meanwhile_waits_for_it() -> None:
    kc = machine_in(Phase.PARKED)
    cluster = kc.cluster
    assert cluster is not None
    first, second = Future[None](), Future[None]()
    assert kc.parking is not None
    assert kc.handle(ResumeAsked(cluster, first)) == [JoinPark(kc.parking)]  # not yet: after the park
    kc.handle(WorkersMoved(cluster, Parked({"w": 1}, 10, 0.0)))
    assert kc.handle(ResumeAsked(a_cluster(), first)) == [Refused("resuming: its workers are not parked")]
    assert kc.handle(ResumeAsked(cluster, first)) == [ResumeWorkers(cluster, first)]
    assert kc.handle(ResumeAsked(cluster, second)) == [JoinResume(first)]
    assert kc.handle(ResumeFailed(cluster)) == [] and kc.phase is Phase.PARKED  # the next try starts again
    assert kc.handle(ResumeFailed(cluster)) == [Refused("resuming: no resume is under way")]
    assert kc.handle(ResumeAsked(cluster, second)) == [ResumeWorkers(cluster, second)]
    assert kc.handle(WorkersMoved(cluster)) == [] and (kc.phase, kc.resuming) == (Phase.IN_USE, None)
    parked = machine_in(Phase.PARKED)
    assert parked.cluster is not None
    parked.handle(WorkersMoved(parked.cluster, Parked({"w": 1}, 10, 0.0)))
    parked.handle(ResumeAsked(parked.cluster, first))
    assert parked.handle(StopAsked()) == [ResumeFirst(parked.cluster)]  # it joins the resume under way, then
    parked.handle(StopAsked(resumed=True))  # stops: the resume's end changes nothing
    assert parked.resuming is None and not accepted(parked.handle(ResumeFailed(parked.cluster)))


def test_an_idle_watch_parks_a_cluster_in_use_and_waits_for_a_start_or_change_under_way() -> None:
    kc = machine_in(Phase.IN_USE)
    cluster, watch = kc.cluster, Watch()
    assert cluster is not None
    assert kc.handle(IdleFor(cluster, watch)) == [ParkIdle(cluster)]
    assert kc.handle(IdleFor(a_cluster(), watch)) == [
        Refused("parking an idle cluster: the cluster is no longer in use")
    ]
    change = handle("scaling")
    kc.handle(ChangeAsked(change, cluster))
    assert kc.handle(IdleFor(cluster, watch)) == [] and kc.idle_waiting is watch  # deferred, not polled
    assert not accepted(kc.handle(IdleFor(a_cluster(), watch)))
    assert kc.handle(ChangeEnded(change)) == [WatchAgain(watch)] and kc.idle_waiting is None
    start, starting = handle(), KernelCluster()
    starting.handle(StartAsked(start, 0))
    assert not accepted(starting.handle(IdleFor(cluster, watch)))  # not in use yet: nothing watches it
    starting.handle(SchedulerAnswered(start, cluster))
    assert starting.handle(IdleFor(cluster, watch)) == []
    assert starting.handle(WorkersReady(start)) == [StartReady(start, cluster, 0.0), WatchAgain(watch)]
    stopped = machine_in(Phase.CHANGING)
    assert stopped.cluster is not None
    stopped.handle(IdleFor(stopped.cluster, watch))
    stopped.handle(StopAsked())
    assert stopped.idle_waiting is None  # a stop ends the wait: nothing watches again


def test_a_start_is_refused_while_one_runs_or_starts_and_a_change_needs_a_cluster_in_use() -> None:
    kc = KernelCluster()
    with pytest.raises(PhaseRefused, match="refused while the cluster is idle"):
        require(kc.handle(ChangeAsked(handle("scaling"), None)))
    start = handle()
    assert accepted(kc.handle(StartAsked(start, kc.generation)))
    with pytest.raises(PhaseRefused, match="refused while the cluster is starting"):
        require(kc.handle(StartAsked(handle(), kc.generation)))
    with pytest.raises(PhaseRefused):
        require(kc.handle(ChangeAsked(handle("scaling"), None)))  # the cluster starting is not yet in use
    cluster = a_cluster()
    assert accepted(kc.handle(SchedulerAnswered(start, cluster))) and accepted(kc.handle(WorkersReady(start)))
    with pytest.raises(PhaseRefused, match="refused while the cluster is in use"):
        require(kc.handle(StartAsked(handle(), kc.generation)))
    with pytest.raises(PhaseRefused, match="no longer in use"):
        require(kc.handle(ChangeAsked(handle("scaling"), a_cluster())))  # another cluster than the one in use
    change = handle("scaling")
    require(kc.handle(ChangeAsked(change, cluster)))
    with pytest.raises(PhaseRefused, match="scaling already"):
        require(kc.handle(ChangeAsked(handle("restarting"), cluster)))
    assert kc.phase is Phase.CHANGING and kc.pending is change  # a refusal changes nothing
    assert kc.handle(ChangeEnded(handle("restarting"))) == [
        Refused("ending a change: the change is no longer under way")
    ]


def test_a_start_decided_from_an_old_view_is_answered_look_again() -> None:
    kc = KernelCluster()
    seen = kc.generation
    machine_started(kc)
    kc.handle(StopAsked())
    kc.handle(CloseEnded())
    assert kc.phase is Phase.IDLE  # the same phase as when ``seen``, but things happened since
    assert kc.handle(StartAsked(handle(), seen)) == [LookAgain()]
    assert not accepted([LookAgain()])
    assert kc.phase is Phase.IDLE
    assert kc.handle(StartAsked(handle(), kc.generation)) == []
    assert kc.handle(StartAsked(handle(), seen)) == [LookAgain()]  # starting now: it looks again, then reuses it
    for phase in (Phase.STARTING, Phase.IN_USE, Phase.CHANGING, Phase.PARKED):
        busy = machine_in(phase)
        assert busy.handle(StartAsked(handle(), busy.generation - 1)) == [LookAgain()]
        assert busy.handle(StartAsked(handle(), busy.generation)) == [
            Refused(f"beginning a start: refused while the cluster is {phase.value}")
        ]


def machine_started(kc: KernelCluster) -> tuple[Starting, ActiveCluster]:
    start, cluster = handle(), a_cluster()
    assert kc.handle(StartAsked(start, kc.generation)) == []
    kc.handle(SchedulerAnswered(start, cluster))
    assert kc.handle(WorkersReady(start)) == [StartReady(start, cluster, 0.0)]
    return start, cluster


def test_a_stop_during_a_start_ends_it_and_the_start_cannot_take_its_cluster_or_be_ready() -> None:
    kc = KernelCluster()
    start = handle()
    kc.handle(StartAsked(start, kc.generation))
    assert kc.handle(StopAsked()) == [CancelStart(start)]
    assert (kc.phase, kc.winding) == (Phase.CLOSING, start)
    assert not accepted(kc.handle(SchedulerAnswered(start, a_cluster())))
    assert not accepted(kc.handle(WorkersReady(start)))
    assert kc.cluster is None
    assert kc.handle(StartEnded(start, failed=False)) == []  # its job ended as stopped: what it made is closed
    assert kc.phase is Phase.IDLE and kc.failed is None


def test_a_stop_of_a_start_whose_scheduler_answered_lets_its_cluster_go() -> None:
    kc = KernelCluster()
    start, cluster = handle(), a_cluster()
    kc.handle(StartAsked(start, kc.generation))
    kc.handle(SchedulerAnswered(start, cluster))
    assert kc.handle(StopAsked(only=a_cluster())) == [] and kc.phase is Phase.STARTING  # another cluster: nothing
    assert kc.handle(StopAsked()) == [CancelStart(start), TellListeners(None)]


def test_a_stop_during_a_change_closes_the_cluster_and_the_change_ends_as_stopped() -> None:
    kc = KernelCluster()
    _, cluster = machine_started(kc)
    change = handle("restarting")
    kc.handle(ChangeAsked(change, cluster))
    assert kc.handle(StopAsked()) == [CloseCluster(cluster, change), TellListeners(None)]
    assert not accepted(kc.handle(ChangeEnded(change)))
    assert kc.phase is Phase.CLOSING


def test_a_failed_start_is_kept_until_said_and_a_stop_lets_it_go() -> None:
    kc = KernelCluster()
    start = handle()
    kc.handle(StartAsked(start, kc.generation))
    assert kc.handle(StartEnded(start, failed=True)) == []
    assert (kc.phase, kc.pending, kc.failed) == (Phase.IDLE, None, start)
    assert kc.handle(StartEnded(start, failed=True)) == [Refused("ending a start: refused while the cluster is idle")]
    assert kc.handle(StopAsked()) == []
    assert kc.failed is None


def test_a_start_that_ends_after_a_stop_ended_its_close_changes_nothing() -> None:
    kc = KernelCluster()
    start = handle()
    kc.handle(StartAsked(start, kc.generation))
    kc.handle(StopAsked())
    kc.handle(CloseEnded())
    kc.handle(StartAsked(handle(), kc.generation))
    kc.handle(StopAsked())  # another start, stopped: its close under way
    assert kc.handle(StartEnded(start, failed=False)) == [
        Refused("ending a start: refused while the cluster is closing")
    ]
    assert kc.phase is Phase.CLOSING


def test_a_stop_for_another_cluster_stops_nothing_and_keep_may_refuse_before_anything_changes() -> None:
    kc = KernelCluster()
    _, cluster = machine_started(kc)
    assert kc.handle(StopAsked(only=a_cluster())) == []
    assert kc.phase is Phase.IN_USE
    assert kc.handle(StopAsked(keep=True)) == [KeepRefused(cluster)]
    assert (kc.phase, kc.cluster) == (Phase.IN_USE, cluster)
    kept, start, gateway = KernelCluster(), handle(), a_cluster(keepable=True)
    kept.handle(StartAsked(start, kept.generation))
    kept.handle(SchedulerAnswered(start, gateway))
    kept.handle(WorkersReady(start))
    assert kept.handle(StopAsked(keep=True)) == [CloseCluster(gateway, None), TellListeners(None)]


def test_a_close_that_ends_after_a_new_start_began_leaves_the_new_start_alone() -> None:
    kc = KernelCluster()
    machine_started(kc)
    kc.handle(StopAsked())
    slow = a_closing()
    kc.handle(CloseBegan(slow))
    assert kc.handle(StopAsked()) == [] and kc.winding is slow  # closing already: nothing more to stop
    start = handle()
    assert kc.handle(StartAsked(start, kc.generation)) == []  # it waited for the close as long as it would
    assert not accepted(kc.handle(CloseEnded(slow)))
    assert (kc.phase, kc.pending) == (Phase.STARTING, start)
    kc.handle(StopAsked())
    assert kc.handle(CloseEnded(a_closing())) == [Refused("ending a close: another close is under way")]


def test_services_are_attached_with_the_start_swapped_one_role_at_a_time_and_all_stopped_at_a_stop() -> None:
    kc = KernelCluster()
    start, cluster = handle(), a_cluster()
    telemetry, watch, other = Beside(), Beside(), Beside()
    kc.handle(StartAsked(start, kc.generation))
    services = ((Role.TELEMETRY, telemetry), (Role.IDLE_TIMEOUT, watch))
    assert accepted(kc.handle(SchedulerAnswered(start, cluster, services)))
    assert cluster.services() == [watch, telemetry]  # in the order they are let go
    assert kc.handle(SwapService(cluster, Role.IDLE_TIMEOUT, other)) == [StopServices((watch,))]  # the old one stops
    assert kc.handle(SwapService(cluster, Role.IDLE_PARK, None)) == []  # nothing did it: nothing stops
    offered = Beside()
    assert kc.handle(SwapService(a_cluster(), Role.IDLE_PARK, offered)) == [
        Refused("changing what runs beside the cluster: the cluster is no longer in use"),
        StopServices((offered,)),
    ]
    assert kc.handle(SwapService(cluster, Role.IDLE_TIMEOUT, None, only_if=watch)) == [
        Refused("changing what runs beside the cluster: another service does it now")
    ]
    assert kc.handle(SwapService(cluster, Role.IDLE_TIMEOUT, None, only_if=other)) == [StopServices((other,))]
    kc.handle(WorkersReady(start))
    kc.handle(SwapService(cluster, Role.IDLE_PARK, watch))
    assert kc.handle(StopAsked()) == [CloseCluster(cluster), StopServices((watch, telemetry)), TellListeners(None)]
    assert cluster.services() == []
    assert kc.handle(SwapService(cluster, Role.IDLE_PARK, offered)) == [
        Refused("changing what runs beside the cluster: the cluster is no longer in use"),
        StopServices((offered,)),
    ]


def test_a_start_that_ends_or_is_stopped_stops_what_it_attached_and_a_refused_one_stops_what_it_offered() -> None:
    for ending in ("failed", "stopped"):
        kc = KernelCluster()
        start, cluster, listener = handle(), a_cluster(), Beside()
        kc.handle(StartAsked(start, kc.generation))
        kc.handle(SchedulerAnswered(start, cluster, ((Role.TELEMETRY, listener),)))
        answer = kc.handle(StartEnded(start, failed=True) if ending == "failed" else StopAsked())
        assert StopServices((listener,)) in answer and cluster.services() == []
    late = Beside()
    assert kc.handle(SchedulerAnswered(start, a_cluster(), ((Role.TELEMETRY, late),))) == [
        Refused("taking a cluster into use: the start is no longer under way"),
        StopServices((late,)),
    ]


@pytest.mark.parametrize("phase", list(Phase))
def test_what_is_offered_beside_a_cluster_not_in_use_stops_in_every_phase(phase: Phase) -> None:
    kc = machine_in(phase)
    offered = Beside()
    assert kc.handle(SchedulerAnswered(handle(), a_cluster(), ((Role.TELEMETRY, offered),))) == [
        Refused("taking a cluster into use: the start is no longer under way"),
        StopServices((offered,)),
    ]
    assert kc.handle(SwapService(a_cluster(), Role.IDLE_PARK, offered)) == [
        Refused("changing what runs beside the cluster: the cluster is no longer in use"),
        StopServices((offered,)),
    ]
    assert kc.phase is phase


def test_every_row_of_the_table_is_met_by_these_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenarios above, run again with every event recorded: each (phase, event type) of the table was met."""
    met: set[tuple[Phase, type[Event]]] = set()
    original = KernelCluster.handle

    def recording(self: KernelCluster, event: Event) -> list[Instruction]:
        met.add((self.phase, type(event)))
        return original(self, event)

    monkeypatch.setattr(KernelCluster, "handle", recording)
    for scenario in (
        test_a_start_a_change_and_a_stop_go_through_their_phases,
        test_a_park_and_a_resume_go_through_their_phases,
        test_a_parked_cluster_asked_to_stop_or_change_resumes_first,
        functools.partial(
            test_adapt_and_free_ask_the_workers_of_the_cluster_in_use_and_a_parked_one_resumes_first, AdaptAsked
        ),
        functools.partial(
            test_adapt_and_free_ask_the_workers_of_the_cluster_in_use_and_a_parked_one_resumes_first, FreeAsked
        ),
        test_one_resume_at_a_time_and_who_asks_meanwhile_waits_for_it,
        test_an_idle_watch_parks_a_cluster_in_use_and_waits_for_a_start_or_change_under_way,
        test_a_start_is_refused_while_one_runs_or_starts_and_a_change_needs_a_cluster_in_use,
        test_a_start_decided_from_an_old_view_is_answered_look_again,
        test_a_stop_during_a_start_ends_it_and_the_start_cannot_take_its_cluster_or_be_ready,
        test_a_stop_of_a_start_whose_scheduler_answered_lets_its_cluster_go,
        test_a_stop_during_a_change_closes_the_cluster_and_the_change_ends_as_stopped,
        test_a_failed_start_is_kept_until_said_and_a_stop_lets_it_go,
        test_a_start_that_ends_after_a_stop_ended_its_close_changes_nothing,
        test_a_stop_for_another_cluster_stops_nothing_and_keep_may_refuse_before_anything_changes,
        test_a_close_that_ends_after_a_new_start_began_leaves_the_new_start_alone,
        test_services_are_attached_with_the_start_swapped_one_role_at_a_time_and_all_stopped_at_a_stop,
        test_a_start_that_ends_or_is_stopped_stops_what_it_attached_and_a_refused_one_stops_what_it_offered,
        *(
            functools.partial(test_what_is_offered_beside_a_cluster_not_in_use_stops_in_every_phase, phase)
            for phase in Phase
        ),
    ):
        scenario()
    assert set(TABLE) - met == set()


ARCHITECTURE = Path(__file__).parents[1] / "docs" / "explanation" / "architecture.md"


def test_the_architecture_page_shows_the_table_as_it_is() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    shown = text.split("<!-- the phase table, from machine.table.describe() -->", 1)[1]
    shown = shown.split("<!-- end of the phase table -->", 1)[0].strip()
    assert shown == describe(), f"the phase table of {ARCHITECTURE.name} should read:\n{describe()}"


def test_the_log_keeps_the_last_events_with_the_phase_and_generation_they_met() -> None:
    kc = KernelCluster()
    start = handle()
    kc.handle(StartAsked(start, 0))
    kc.handle(StartAsked(handle(), 0))
    kc.handle(StopAsked())
    assert [(s.event, s.phase, s.generation) for s in kc.log] == [
        (StartAsked, Phase.IDLE, 0),
        (StartAsked, Phase.STARTING, 1),
        (StopAsked, Phase.STARTING, 1),
    ]
    assert kc.log[1].instructions == (LookAgain,) and kc.log[2].instructions == (CancelStart,)
    for _ in range(kc.log.maxlen or 0):
        kc.handle(CloseEnded())
    assert len(kc.log) == kc.log.maxlen and all(s.event is CloseEnded for s in kc.log)


def test_of_many_threads_posting_a_start_from_one_view_exactly_one_wins() -> None:
    seen = owner.view()
    assert seen.phase is Phase.IDLE
    results: list[bool] = []
    gate = threading.Barrier(8)

    def race() -> None:
        gate.wait(10)
        results.append(accepted(owner.post(StartAsked(handle(), seen.generation))))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False] * 7 + [True]
    assert kernel_cluster.phase() is Phase.STARTING
    start = kernel_cluster.under_way()
    assert start is not None
    owner.post(StartEnded(start, failed=False))
    assert kernel_cluster.phase() is Phase.IDLE


def test_starts_and_stops_posted_from_many_threads_always_leave_one_consistent_phase(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(owner, "_carriers", {})  # the phases only: nothing of these stand-in clusters is set up
    kc = kernel_cluster.kernel_cluster()
    gate = threading.Barrier(6)

    def starter() -> None:
        gate.wait(10)
        for _ in range(40):
            start, seen = handle(), owner.view()
            if seen.phase not in (Phase.IDLE, Phase.CLOSING):  # something runs: a verb would reuse or stop it
                continue
            began = accepted(owner.post(StartAsked(start, seen.generation)))
            if began and accepted(owner.post(SchedulerAnswered(start, a_cluster()))):
                owner.post(WorkersReady(start))

    def stopper() -> None:
        gate.wait(10)
        for _ in range(40):
            for instruction in owner.post(StopAsked()):
                if isinstance(instruction, CancelStart):
                    owner.post(StartEnded(instruction.start, failed=False))
            owner.post(CloseEnded())

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
    owner.post(StopAsked())
    owner.post(CloseEnded())
    assert kernel_cluster.phase() is Phase.IDLE


@pytest.mark.slow  # a real cluster with a worker process
def test_a_real_start_racing_a_stop_from_another_thread_ends_in_one_phase() -> None:
    options = parse_cluster_line("--cpu-workers 1 --name racing")
    starting = start.begin(options, telemetry_interval=0, background=True)
    said: list[str] = []
    stopper = threading.Thread(target=lambda: said.append(stop.stop()), name="a-stopping-thread")
    stopper.start()
    stopper.join(60)
    starting.finished.wait(60)
    assert stop.wait_wound_down(60)
    assert said and said[0].startswith("%gpucluster: stopped")
    assert kernel_cluster.phase() is Phase.IDLE
    assert kernel_cluster.in_use() is None and kernel_cluster.under_way() is None
    # the stop came first (its job ends as stopped, or fails on what the stop closed), or just after it was ready
    assert starting.progress().phase in ("stopped", "failed", "ready")
    assert stop.stop() == stop.NO_CLUSTER

"""``--protocol``: tcp, and ucx/ucxx as one choice mapped to what the installed distributed-ucxx registers."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

import pytest
from IPython.core.error import UsageError

from gpu_magics.cluster.managers import needs
from gpu_magics.cluster.options import parse_cluster_line


@pytest.mark.parametrize("spelling", ["tcp", "ucx", "ucxx"])
def test_every_spelling_parses(spelling: str) -> None:
    assert parse_cluster_line(f"--protocol {spelling}").protocol == spelling


def test_tcp_is_tcp_whatever_is_installed() -> None:
    assert needs.comm_protocol("tcp") == "tcp"


@pytest.mark.parametrize(
    ("registered", "expected"),
    [({"ucx", "ucxx"}, "ucx"), ({"ucxx"}, "ucxx"), ({"ucx"}, "ucx")],
)
@pytest.mark.parametrize("spelling", ["ucx", "ucxx"])
def test_ucx_spellings_map_to_the_registered_scheme(
    monkeypatch: pytest.MonkeyPatch, registered: set[str], expected: str, spelling: str
) -> None:
    monkeypatch.setattr(needs, "ucxx_schemes", lambda: frozenset(registered))
    assert needs.comm_protocol(spelling) == expected


def test_without_distributed_ucxx_ucx_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(needs, "ucxx_schemes", frozenset)
    monkeypatch.setattr(needs, "legacy_ucx_py", lambda: False)
    with pytest.raises(UsageError) as raised:
        needs.comm_protocol("ucxx")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("%gpucluster --protocol ucxx: UCX needs the distributed-ucxx package")
    assert "distributed-ucxx-cu12" in message and "leave --protocol out for tcp" in message


def test_legacy_ucx_py_keeps_distributeds_own_ucx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(needs, "ucxx_schemes", frozenset)
    monkeypatch.setattr(needs, "legacy_ucx_py", lambda: True)
    assert needs.comm_protocol("ucxx") == "ucx"


class EntryPoint:
    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value


def test_schemes_come_from_distributed_ucxx_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [
        EntryPoint("ucx", "distributed_ucxx:UCXXBackend"),
        EntryPoint("ucxx", "distributed_ucxx:UCXXBackendLegacyPrefix"),
        EntryPoint("other", "someone_else:Backend"),
    ]
    seen: dict[str, Any] = {}

    def entry_points(group: str) -> list[EntryPoint]:
        seen["group"] = group
        return points

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "distributed_ucxx" else None)
    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert needs.ucxx_schemes() == {"ucx", "ucxx"}
    assert seen["group"] == "distributed.comm.backends"


def test_no_schemes_without_distributed_ucxx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert needs.ucxx_schemes() == frozenset()
    assert needs.legacy_ucx_py() is False


def warns(message: str) -> int:
    import warnings

    warnings.warn(message, FutureWarning, stacklevel=1)
    return 1


@pytest.mark.parametrize("spelling", ["ucx", "ucxx"])
def test_ucx_py_deprecation_warning_is_silenced_for_ucx_only(spelling: str) -> None:
    import warnings

    ucx_py = "Using protocol='ucx' with UCX-Py is deprecated,\nplease install distributed-ucxx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert needs.quiet_ucx_deprecations(lambda: warns(ucx_py), spelling)() == 1
        assert caught == []
        needs.quiet_ucx_deprecations(lambda: warns("something else"), spelling)()
        needs.quiet_ucx_deprecations(lambda: warns(ucx_py), "tcp")()
    assert [str(w.message) for w in caught] == ["something else", ucx_py]


def test_the_abandoned_gather_report_is_dropped_once_per_loop_and_others_go_on() -> None:
    """The kernel's clients share one event loop: starting clusters again does not stack handlers, an interrupted
    gather's ``AllExit`` is dropped, and any other report still reaches the handler that was there before."""
    import asyncio

    from distributed.client import AllExit

    from gpu_magics.cluster.control.steps import quiet_abandoned_gathers

    loop = asyncio.new_event_loop()
    seen: list[object] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context.get("exception")))
    try:
        quiet_abandoned_gathers(loop)
        installed = loop.get_exception_handler()
        quiet_abandoned_gathers(loop)
        assert loop.get_exception_handler() is installed
        loop.call_exception_handler({"message": "Task exception was never retrieved", "exception": AllExit()})
        other = ValueError("kept")
        loop.call_exception_handler({"message": "something else", "exception": other})
        assert seen == [other]
    finally:
        loop.close()

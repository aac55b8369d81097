"""The rule by which the idle reclaim closes a cluster (``cluster.background.verbs.reclaim.why_kept``), on a real
scheduler: nothing kept for any client, nothing running; a future, a persisted collection, a published dataset or
another client's data keeps it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from distributed import Client, LocalCluster, Variable

from gpu_magics.cluster.control.verbs.reclaim import why_kept

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as made,
    ):
        yield made


def kept(client: Client) -> str | None:
    return why_kept(SimpleNamespace(client=client))


def settled(client: Client, timeout: float = 60) -> str | None:
    """``why_kept`` once the scheduler has forgotten what was let go (releases reach it asynchronously)."""
    deadline = time.monotonic() + timeout
    while (found := kept(client)) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_an_empty_idle_cluster_may_close(client: Client) -> None:
    assert settled(client) is None


def test_a_future_or_a_persisted_collection_keeps_it_until_let_go(client: Client) -> None:
    import dask.array as da

    future = client.submit(sum, [1, 2])
    future.result()
    assert kept(client) == "it keeps 1 piece of data (persisted collections, futures); close it with %gpucluster stop"
    del future
    array = da.arange(10, chunks=5).persist()
    assert kept(client) == (
        "it keeps 2 pieces of data (persisted collections, futures); close it with %gpucluster stop"
    )
    assert int(array.sum().compute()) == 45
    del array
    assert settled(client) is None


def test_what_the_scheduler_keeps_for_others_keeps_it_too(client: Client) -> None:
    assert settled(client) is None
    with Client(client.scheduler.address) as other:  # type: ignore[union-attr]
        theirs = other.scatter(list(range(3)))
        assert "3 pieces of data" in (kept(client) or "")  # another client's futures
        other.publish_dataset(theirs=theirs)
        del theirs
        # published: kept though no future refers to it any more (let go, it would settle within the 2 s)
        assert "3 pieces of data" in (settled(client, timeout=2) or "")
        other.unpublish_dataset("theirs")
    assert settled(client) is None
    variable = Variable("kept", client=client)
    variable.set(client.scatter(7))
    assert "1 piece of data" in (kept(client) or "")
    variable.delete()
    assert settled(client) is None

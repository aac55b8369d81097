"""``%gpucluster --address``: a scheduler this kernel did not start. Its workers are someone else's: nothing here
scales, restarts or stops them, and ``stop`` only disconnects."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.managers import attach
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import PROG, ClusterOptions

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting


class AttachedManager(ClusterManager):
    """The scheduler at ``address``."""

    scalable = False
    start_words = "could not use the cluster"

    def __init__(self, address: str) -> None:
        super().__init__(None, None)
        self.address = address

    @property
    def source(self) -> str:
        return "attached, not started here"

    @property
    def taken(self) -> str:
        return "attached at"

    @property
    def title(self) -> str:
        return "attached"

    def connect(self, options: ClusterOptions, starting: Starting) -> Client:
        return attach.connect(self.address, options.start_timeout)

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        return None  # the workers it has now are the workers it has

    def learn(self, client: Client, devices: dict[str, dict[str, Any]], addresses: set[str]) -> None:
        with contextlib.suppress(Exception):
            attach.learn_gpus(client, devices, addresses)

    def warms(self) -> bool:
        return False  # not ours to load work onto at attach time

    def expected_workers(self) -> int:
        return 0

    def close(self) -> None:
        """Nothing to close: the scheduler and its workers keep running."""

    def finish(self, name: str, close: bool, keep: bool = False) -> str:
        return (
            f"{PROG}: disconnected from {self.address}; its scheduler and workers keep running (this kernel did not "
            "start them)"
        )

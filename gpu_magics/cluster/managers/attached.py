"""``%gpucluster --address``: a scheduler this kernel did not start. Its workers are someone else's: nothing here
scales, restarts or stops them, and ``stop`` only disconnects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.managers import attach
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.units import dropped

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting


class AttachedManager(ClusterManager):
    """The scheduler at ``address``."""

    scalable = False
    _start_words = "could not use the cluster"

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

    def start(self, options: ClusterOptions, starting: Starting) -> Client:
        return attach.connect(self.address, options.start_timeout)

    def await_workers(self, client: Client, options: ClusterOptions, starting: Starting) -> str | None:
        return None  # the workers it has now are the workers it has

    def learn(self, client: Client, devices: dict[str, dict[str, Any]], addresses: set[str]) -> None:
        try:
            attach.learn_gpus(client, devices, addresses)
        except (OSError, RuntimeError) as error:  # the scheduler silent (comm failed, timed out), its loop gone: the
            # attach goes on without them (a worker's own failure comes back as its answer, and is skipped)
            dropped("learning the attached workers' GPUs", error)

    def _warm(
        self, client: Client, options: ClusterOptions, devices: dict[str, dict[str, Any]], starting: Starting
    ) -> None:
        return None  # not ours to load work onto at attach time

    def expected_workers(self) -> int:
        return 0

    def finish(self, name: str, keep: bool | None = None) -> str:
        """Nothing to close: the scheduler and its workers keep running."""
        return (
            f"{PROG}: disconnected from {self.address}; its scheduler and workers keep running (this kernel did not "
            "start them)"
        )

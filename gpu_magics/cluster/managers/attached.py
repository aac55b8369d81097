"""``%gpucluster --address``: a scheduler this kernel did not start. Its workers are someone else's: nothing here
scales, restarts or stops them, and ``stop`` only disconnects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.managers import attach
from gpu_magics.cluster.managers.base import ClusterManager, same_address
from gpu_magics.cluster.options import DEFAULT_ATTACH_TIMEOUT, PROG, ClusterOptions
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting


class AttachedManager(ClusterManager):
    """The scheduler at ``address``."""

    scalable = False
    hardware_note = ", attached"
    _start_words = "could not use the cluster"

    def __init__(self, address: str, timeout: float = DEFAULT_ATTACH_TIMEOUT) -> None:
        super().__init__(None, None)
        self.address = address
        self.timeout = timeout  # the line's --timeout: how long ``open`` waits for the scheduler to answer

    @property
    def source(self) -> str:
        return "attached, not started here"

    @property
    def taken(self) -> str:
        return "attached at"

    @property
    def title(self) -> str:
        return "attached"

    def open(self, reuse: bool = False) -> None:
        """A start (a ``--replace`` too, before the running cluster stops): a Dask scheduler answers at the address
        within the line's timeout. A line that reuses the cluster in use asks nothing."""
        if not reuse:
            attach.check_answers(self.address, self.timeout)

    def same_as(self, running: ClusterManager | None, address: str | None) -> bool:
        """The scheduler in use is the one at this address."""
        if isinstance(running, AttachedManager) and same_address(running.address, self.address):
            return True
        return address is not None and same_address(self.address, address)

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

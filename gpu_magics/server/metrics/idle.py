"""Since when each kernel's GPU memory has sat on idle GPUs: state kept from one refresh to the next (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping


class IdleHold:
    """Per kernel, the start of the current stretch during which everything it holds was on idle GPUs."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def update(self, idle: Mapping[str, bool | None], now: float) -> dict[str, float | None]:
        """``idle``: kernel -> whether every GPU it holds memory on was idle (``None``: cannot be told, such as
        a MIG instance without utilization). Returns kernel -> since when it has held idle memory (``None``:
        its GPUs are busy); kernels that cannot be told, or hold nothing, are left out and start again."""
        found: dict[str, float | None] = {}
        for kernel, state in idle.items():
            if state is None:
                continue
            if state:
                found[kernel] = self._since.setdefault(kernel, now)
            else:
                found[kernel] = None
        self._since = {kernel: since for kernel, since in self._since.items() if found.get(kernel) is not None}
        return found

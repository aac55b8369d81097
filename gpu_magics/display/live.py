"""The live GPU panel as a widget that redraws itself from the sampler's snapshots."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.display.monitor_view import live_panel, live_panel_text
from gpu_magics.monitor.models import Snapshot
from gpu_magics.monitor.sampler import Sampler


def can_show_widgets(shell: InteractiveShell | None) -> bool:
    """Whether ``shell`` runs in a kernel whose front end can draw widgets (not a terminal IPython)."""
    return shell is not None and getattr(shell, "kernel", None) is not None


class LivePanel:
    """An ``ipywidgets.HTML`` showing the newest snapshot, with a sparkline of the recent ones.

    Subscribes to the sampler on ``start()`` and unsubscribes on ``stop()``; its mimebundle carries HTML and
    text fallbacks, so a saved notebook without widget state still shows the last view.
    """

    def __init__(self, sampler: Sampler, title: str = "GPUs", history: int = 60) -> None:
        import ipywidgets

        self.sampler = sampler
        self.title = title
        self._recent: deque[Snapshot] = deque(sampler.history()[-history:], maxlen=history)
        self._lock = threading.Lock()
        self._unsubscribe: Any = None
        self.widget = ipywidgets.HTML(value=live_panel(list(self._recent), title))

    def start(self) -> None:
        if self._unsubscribe is None:
            self._unsubscribe = self.sampler.subscribe(self._on_snapshot)

    def stop(self) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()

    @property
    def running(self) -> bool:
        return self._unsubscribe is not None

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._recent.append(snapshot)
            markup = live_panel(list(self._recent), self.title)
        self.widget.value = markup

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        with self._lock:
            recent = list(self._recent)
        bundle["text/html"] = live_panel(recent, self.title)
        bundle["text/plain"] = live_panel_text(recent[-1] if recent else None)
        return bundle

"""Closing a scheduler's dashboard the way the installed bokeh asks, before the scheduler closes.

distributed up to 2026.7 stops each web application of a closing scheduler with a synchronous ``stop()``, called
on the scheduler's own running event loop. From bokeh 3.10 on, ``BokehTornado.stop()`` refuses to wait there
(``RuntimeError: Cannot synchronously wait on a running event loop; use 'await stop_async()'``): every close of
a cluster with a dashboard logged that traceback, and the scheduler's close stopped at it. Awaiting
``stop_async()`` first, on that loop, and leaving a ``stop()`` with nothing left to do closes the dashboard
cleanly with every bokeh and distributed version (older bokeh has no ``stop_async`` and stops synchronously
without complaint; newer distributed awaits ``stop_async`` itself, which then returns at once). Where
``stop_async()`` fails or does not end in time (at interpreter exit its executor takes no more work), the dashboard is
left to end with the process, quietly: neither stop is called again, so the scheduler's close goes on without a
logged traceback.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger(__name__)

# Seconds to wait for the dashboard's sessions to wind down; the scheduler closes either way.
STOP_TIMEOUT = 5.0


async def stop_dashboard(cluster: Any, timeout: float = STOP_TIMEOUT) -> None:
    """Stop the web applications of ``cluster``'s in-process scheduler that can stop asynchronously.

    Run on the scheduler's event loop (a ``SpecCluster``'s own ``_close`` is). Never raises: a dashboard that
    does not stop in time is left to the scheduler's close, as before.
    """
    scheduler = getattr(cluster, "scheduler", None)
    routing = getattr(scheduler, "http_application", None)
    for application in list(getattr(routing, "applications", None) or ()):
        stop_async = getattr(application, "stop_async", None)
        if not callable(stop_async) or getattr(application, "_gpu_magics_stopped", False):
            continue
        try:
            await asyncio.wait_for(stop_async(), timeout)
        except Exception as error:  # the cluster still closes; say why only in the debug log
            logger.debug("the dashboard did not stop cleanly; it ends with its process: %r", error)
        application._gpu_magics_stopped = True
        application.stop = _already_stopped  # what a distributed that stops synchronously calls next
        application.stop_async = _already_stopped_async  # what a distributed that awaits it calls next


def _already_stopped(wait: bool = True) -> None:
    """``stop()`` of an application whose ``stop_async()`` has run: nothing is left to stop."""


async def _already_stopped_async() -> None:
    """``stop_async()`` of an application whose ``stop_async()`` has run: nothing is left to stop."""


def forget_scheduler(scheduler: Any) -> None:
    """Drop what distributed's module-level caches keep of a closed ``scheduler``, so that nothing of it (its
    dashboard's bokeh applications, tornado routes, state) stays alive after its cluster closed: the handler cache
    ``distributed.core._expects_comm`` (keyed by bound methods, so it holds every server it ever saw; cleared,
    it refills as handlers are called) and the dashboard's memoized ``template_variables(scheduler)``. Never
    raises: a distributed without these caches has nothing to forget."""
    try:
        from distributed import core
        from distributed.dashboard import scheduler as dashboard_scheduler
    except ImportError:  # a distributed without these modules has nothing to forget
        return
    cache_clear = getattr(getattr(core, "_expects_comm", None), "cache_clear", None)
    if callable(cache_clear):
        cache_clear()
    memo = _memo_cache(getattr(dashboard_scheduler, "template_variables", None))
    if memo is not None:
        for key in [key for key in memo if key is scheduler or (isinstance(key, tuple) and scheduler in key)]:
            memo.pop(key, None)


def _memo_cache(function: Any) -> dict[Any, Any] | None:
    """The dict a ``toolz.memoize``'d function keeps its results in (a variable of its closure), or ``None``."""
    code = getattr(function, "__code__", None)
    closure = getattr(function, "__closure__", None) or ()
    names = getattr(code, "co_freevars", ())
    if "cache" not in names or len(closure) != len(names):
        return None
    found = closure[names.index("cache")].cell_contents
    return found if isinstance(found, dict) else None

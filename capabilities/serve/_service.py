"""Running the API with its worker: one Trio nursery owns the HTTP server (Hypercorn's Trio
worker) and the :class:`~capabilities.durable.DurableWorker` beside it, and drains both.

The order, in :func:`serve`: the server listens first (``/healthz`` answers, ``/readyz`` says
503); the worker starts — its runtime opened, the overdue submissions looked at — and then the
API is :meth:`~ServeApi.ready`. When ``stop`` is set (the command sets it on SIGTERM or SIGINT)
the API drains: new submissions are refused (503), ``/readyz`` says 503, and the worker's runs
get ``grace`` seconds to finish (it may take up submissions already queued meanwhile; the drain
ends early once it holds none); then the worker is cancelled — it lets the lanes it still holds
go first, so their submissions wait, queued, for the next worker, which resumes them from the
log (nothing is lost) — the event streams end and the server shuts down gracefully.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from ..durable import DurableWorker
from ._app import ServeApi

__all__ = ["hypercorn_config", "serve"]


def hypercorn_config(bind: str, *, graceful_timeout: float = 5.0) -> Config:
    """Hypercorn's configuration for ``bind`` (``HOST:PORT``; port 0: a free one): no access
    log (it would name every client's paths; the service logs what an operator needs), its own
    log at WARNING and above, no ``Server`` header, ``graceful_timeout`` seconds for open
    connections to end once it stops."""
    config = Config()
    config.bind = [bind]
    config.accesslog = None
    config.graceful_timeout = graceful_timeout
    config.include_server_header = False
    config.loglevel = "WARNING"  # its errors, not its start line (the command says where)
    return config


async def serve(
    api: ServeApi,
    stop: trio.Event,
    *,
    bind: str = "127.0.0.1:8080",
    worker: DurableWorker | None = None,
    metrics_interval: float = 5.0,
    on_drain: Callable[[], None] | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``api`` on ``bind`` with ``worker`` (None: none in this process — other processes
    run the submissions) until ``stop`` is set, then drain (see the module notes) and return.
    ``task_status.started(urls)`` once it listens and is ready (``urls``: where, e.g.
    ``["http://127.0.0.1:41234"]``). ``on_drain`` is called when the drain starts.

    Cancellation: the worker lets its lanes go (their submissions wait for another worker), the
    server stops at once, and it returns as soon as both have stopped."""
    settings = api.settings
    stopped = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: hypercorn_serve(
                cast(Any, api.app),  # an ASGI 3 app (hypercorn's types are narrower)
                hypercorn_config(bind),
                shutdown_trigger=stopped.wait,
                task_status=task_status,
            )
        )
        worker_scope = trio.CancelScope()
        if worker is not None:

            async def work(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                with worker_scope:
                    await worker.run(task_status=task_status)

            await nursery.start(work)
            api.wake = worker.wake
        watch_scope = trio.CancelScope()
        if api.metrics is not None:
            metrics = api.metrics

            async def watch() -> None:
                with watch_scope:
                    await metrics.watch(api.database, api.queue, interval=metrics_interval)

            nursery.start_soon(watch)
        api.ready()
        task_status.started(urls)
        await stop.wait()
        api.drain()
        if on_drain is not None:
            on_drain()
        if worker is not None:
            with trio.move_on_after(settings.grace):
                while True:  # the worker has no event for it: looked at as often as it polls
                    if not worker.held:
                        break
                    await trio.sleep(min(0.05, worker.options.poll_interval))
            worker_scope.cancel()
        watch_scope.cancel()
        api.close_streams()
        stopped.set()

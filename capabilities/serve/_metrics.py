"""OpenTelemetry metrics of the service, on the OpenTelemetry API's meter (which SDK and
exporter is the host's choice; without an SDK every instrument is a no-op).

Instruments (units in brackets):

* ``effectagent.serve.submissions`` — submissions admitted, by principal;
* ``effectagent.serve.refusals`` — submissions refused, by principal and reason (``quota``,
  ``draining``, or the problem type of another refusal: ``idempotency-conflict``,
  ``unknown-agent``, ``not-found``, ``bad-request``, ``unavailable`` for a storage failure);
* ``effectagent.serve.admission.duration`` [s] — how long an admission took (the commit);
* ``effectagent.runs`` — submissions settled, by status; ``effectagent.runs.failures`` —
  those settled ``failed``; ``effectagent.runs.duration`` [s] — from admission to settlement;
* ``effectagent.runs.tokens`` — tokens of the runs this process's worker ran, by direction
  (``input``/``output``: the totals of each run's terminal event, :meth:`ServeMetrics.listener`);
* ``effectagent.queue.age`` [s] — how long the oldest queued submission has waited;
  ``effectagent.settlement.age`` [s] — the oldest unsettled one's; ``effectagent.submissions.open``
  — unsettled submissions by status; ``effectagent.tool_calls.unknown`` — calls settled Unknown.

The gauges and the settlement counters are fed by :meth:`ServeMetrics.watch`, which reads the
ledger every ``interval`` seconds (settlements made by any process on the database count).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import Final, final

import trio

from effectagent.core import RunCompleted, RunFailed, RunInterrupted, RunSuspended
from effectagent.effect import Layer
from effectagent.engine import RunListener, RunListenerService

from ..durable import DurableQueue
from ..storage import Database, StorageError
from . import _ledger
from ._live import RunListeners, check_listeners

try:  # the OpenTelemetry API is the telemetry extra's: without it there are no metrics
    from opentelemetry import metrics
    from opentelemetry.metrics import CallbackOptions, Meter, Observation
except ImportError:  # pragma: no cover - exercised in a subprocess by the tests
    metrics = None  # type: ignore[assignment]

__all__ = ["ServeMetrics", "metrics_available"]


def metrics_available() -> bool:
    """Whether the OpenTelemetry API is installed (``pip install 'effectagent[telemetry]'``):
    without it, :class:`ServeMetrics` cannot be made and the service has no metrics."""
    return metrics is not None


_TERMINAL: Final = (RunCompleted, RunFailed, RunInterrupted, RunSuspended)
_OPEN: Final = ("queued", "active", "suspended", "joining", "dead")


@final
class _TokenListener:
    """The engine's run listener: counts each run's tokens from its terminal event."""

    __slots__ = ("_add",)

    def __init__(self, add: Callable[[int, int], None]) -> None:
        self._add = add

    def on_event(self, event: object) -> None:
        if isinstance(event, _TERMINAL):
            self._add(event.usage.input_tokens, event.usage.output_tokens)

    def call_context(self, run_id: str, tool_call_id: str) -> AbstractContextManager[object]:
        return nullcontext()


@final
class ServeMetrics:
    """The service's instruments on ``meter`` (None: the global meter provider's
    ``effectagent.serve`` meter). ``clock``: wall-clock seconds (ages are measured on it).
    Raises ``ImportError`` without the OpenTelemetry API (:func:`metrics_available`)."""

    __slots__ = (
        "_admission",
        "_by_status",
        "_clock",
        "_failures",
        "_oldest_queued",
        "_oldest_unsettled",
        "_refusals",
        "_run_duration",
        "_runs",
        "_since",
        "_submissions",
        "_tokens",
        "_unknown",
    )

    def __init__(self, meter: Meter | None = None, *, clock: Callable[[], float] = time.time):
        if metrics is None:
            raise ImportError(
                "the service's metrics need the OpenTelemetry API: "
                "pip install 'effectagent[telemetry]' (or opentelemetry-api)"
            )
        meter = meter or metrics.get_meter("effectagent.serve")
        self._clock = clock
        self._since = clock()
        self._by_status: dict[str, int] = {}
        self._oldest_queued: float | None = None
        self._oldest_unsettled: float | None = None
        self._unknown = 0
        self._submissions = meter.create_counter(
            "effectagent.serve.submissions", description="Submissions admitted"
        )
        self._refusals = meter.create_counter(
            "effectagent.serve.refusals", description="Submissions refused"
        )
        self._admission = meter.create_histogram(
            "effectagent.serve.admission.duration", unit="s", description="Admission time"
        )
        self._runs = meter.create_counter("effectagent.runs", description="Submissions settled")
        self._failures = meter.create_counter(
            "effectagent.runs.failures", description="Submissions settled failed"
        )
        self._run_duration = meter.create_histogram(
            "effectagent.runs.duration", unit="s", description="Admission to settlement"
        )
        self._tokens = meter.create_counter("effectagent.runs.tokens", description="Run tokens")
        meter.create_observable_gauge(
            "effectagent.queue.age",
            callbacks=[self._queue_age],
            unit="s",
            description="The oldest queued submission's wait",
        )
        meter.create_observable_gauge(
            "effectagent.settlement.age",
            callbacks=[self._settlement_age],
            unit="s",
            description="The oldest unsettled submission's age",
        )
        meter.create_observable_gauge(
            "effectagent.submissions.open",
            callbacks=[self._open],
            description="Unsettled submissions by status",
        )
        meter.create_observable_gauge(
            "effectagent.tool_calls.unknown",
            callbacks=[self._unknown_count],
            description="Tool calls settled Unknown",
        )

    # ---- what the service reports ----------------------------------------------------------------

    def admitted(self, principal: str, seconds: float) -> None:
        """A submission of ``principal`` was admitted in ``seconds``."""
        self._submissions.add(1, {"effectagent.principal": principal})
        self._admission.record(seconds)

    def refused(self, principal: str, reason: str) -> None:
        """A submission of ``principal`` was refused (``reason``: see the module notes)."""
        self._refusals.add(1, {"effectagent.principal": principal, "reason": reason})

    def tokens(self, input_tokens: int, output_tokens: int) -> None:
        """A run used these tokens."""
        self._tokens.add(input_tokens, {"direction": "input"})
        self._tokens.add(output_tokens, {"direction": "output"})

    def listener(self, *also: RunListener) -> Layer:
        """A Layer providing the engine's ``RunListenerService`` that counts tokens (give it to
        the worker's layer). A runtime has one run listener: give the others it should have here
        — ``metrics.listener(telemetry)`` — and each sees every event (``RunListeners``); a
        layer merged after this one that provides another replaces it. Raises ``TypeError`` for
        one that is not a run listener."""
        check_listeners(also)
        found: RunListener = _TokenListener(self.tokens)
        if also:
            found = RunListeners(found, *also)
        return Layer.succeed(RunListenerService, found, name="serve_token_metrics")

    def observe(
        self,
        figures: _ledger.LedgerFigures,
        unknown: int,
        settled: Sequence[tuple[str, float, float, float]],
    ) -> None:
        """Take what the ledger holds now (see :meth:`watch`). Pure apart from the counters."""
        self._by_status = dict(figures.by_status)
        self._oldest_queued = figures.oldest_queued
        self._oldest_unsettled = figures.oldest_unsettled
        self._unknown = unknown
        for status, admitted_at, _started_at, settled_at in settled:
            self._runs.add(1, {"status": status})
            if status == "failed":
                self._failures.add(1)
            self._run_duration.record(max(0.0, settled_at - admitted_at), {"status": status})
            self._since = max(self._since, settled_at)

    async def refresh(self, database: Database, queue: DurableQueue) -> None:
        """Read the ledger once and :meth:`observe` it.

        Cancellation: reads only; cancelled, nothing is observed."""
        figures = await _ledger.figures(database)
        unknown = len(await queue.unknown())
        settled = await _ledger.settled_since(database, self._since, limit=10_000)
        self.observe(figures, unknown, settled)

    async def watch(
        self, database: Database, queue: DurableQueue, *, interval: float = 5.0
    ) -> None:
        """:meth:`refresh` every ``interval`` seconds, until cancelled; a storage error is
        skipped (the next read tries again).

        Cancellation: stops at once (reads only)."""
        while True:
            with suppress(StorageError):
                await self.refresh(database, queue)
            await trio.sleep(interval)

    # ---- the gauges' callbacks -------------------------------------------------------------------

    def _age(self, since: float | None) -> Iterable[Observation]:
        return [Observation(0.0 if since is None else max(0.0, self._clock() - since))]

    def _queue_age(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._age(self._oldest_queued)

    def _settlement_age(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._age(self._oldest_unsettled)

    def _open(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._by_status.get(s, 0), {"status": s}) for s in _OPEN]

    def _unknown_count(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._unknown)]

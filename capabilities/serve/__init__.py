"""``effectagent serve``: the durable runtime (``capabilities.durable``) over HTTP, with an
operator console — an ASGI app (Starlette, on anyio) that runs under Hypercorn's Trio worker.

* :class:`ServeApi` — the API over a database's durable queue; ``ServeApi(...).app`` is the ASGI
  app, to serve or to mount in an app of your own. Submissions (an ``Idempotency-Key`` header is
  the admission key), their status and settlement, a conversation's log as Server-Sent Events
  resumable with ``Last-Event-ID``, steering and follow-ups, approvals and decisions, abort,
  retry, conversations and search, Unknown calls, overdue settlements and dead letters; errors
  as RFC 9457 problem documents; the OpenAPI document at ``/openapi.json``, derived from the
  same types; the console at ``/console``. With its worker in the same process (its layer
  given :meth:`ServeApi.listener`), the runs' text deltas reach the event streams live
  (:class:`LiveText`: ephemeral events without ``id``, bounded per client); on PostgreSQL, a
  worker in another process reaches them too through :class:`LiveRelay` (:func:`live_relay`:
  its listener in the worker's layer, ``relay.follow(api.live)`` in the serving process).
* :class:`ServeSettings`, :class:`Tokens`, :class:`Principal`, :class:`Quota` — who may call it
  (bearer tokens → principals; operators see everything, others their own conversations) and
  its bounds (bodies, event streams, admission quotas per principal).
* :func:`serve` — one Trio nursery running the server and a :class:`DurableWorker` beside it,
  ready once the worker's recovery ran, draining on ``stop`` (SIGTERM in the command).
* :class:`ServeMetrics` — OpenTelemetry metrics (runs, tokens, latency, failures, queue age,
  settlement age, Unknown calls), when the OpenTelemetry API is installed
  (:func:`metrics_available`).

Needs the ``serve`` extra (``pip install 'effectagent[serve]'``): ``import capabilities`` does
not import this package.
"""

from ._api import ENDPOINTS as ENDPOINTS
from ._api import Endpoint as Endpoint
from ._app import ServeApi as ServeApi
from ._auth import Principal as Principal
from ._auth import Tokens as Tokens
from ._auth import token_digest as token_digest
from ._live import LiveFeed as LiveFeed
from ._live import LiveRelay as LiveRelay
from ._live import LiveText as LiveText
from ._live import RunListeners as RunListeners
from ._live import live_relay as live_relay
from ._metrics import ServeMetrics as ServeMetrics
from ._metrics import metrics_available as metrics_available
from ._openapi import openapi_document as openapi_document
from ._problems import Problem as Problem
from ._quota import Quota as Quota
from ._service import hypercorn_config as hypercorn_config
from ._service import serve as serve
from ._settings import DEFAULT_QUOTA as DEFAULT_QUOTA
from ._settings import ServeSettings as ServeSettings

__all__ = [
    "DEFAULT_QUOTA",
    "ENDPOINTS",
    "Endpoint",
    "LiveFeed",
    "LiveRelay",
    "LiveText",
    "Principal",
    "Problem",
    "Quota",
    "RunListeners",
    "ServeApi",
    "ServeMetrics",
    "ServeSettings",
    "Tokens",
    "hypercorn_config",
    "live_relay",
    "metrics_available",
    "openapi_document",
    "serve",
    "token_digest",
]

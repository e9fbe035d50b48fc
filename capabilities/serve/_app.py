"""The HTTP API: a Starlette app over a :class:`~capabilities.durable.DurableQueue`.

Every handler is wrapped by :meth:`ServeApi._wrap`: the principal is resolved from the bearer
token (401 without a valid one, unless the settings name an anonymous principal), the body is
read within ``max_body`` bytes (413) as JSON (415 otherwise; 400 for a member named twice or
text that is not Unicode), a header it reads or a query parameter given twice is refused (400),
and whatever is refused becomes an RFC 9457 problem document. A conversation is its first
submitter's: another principal — not an operator — reading it gets 404, exactly as for one that
does not exist; submitting to it gets that same 404 (the queue checks the owner in the admitting
transaction), where one that does not exist yet is admitted and becomes the submitter's
(conversation IDs are global). Each path answers exactly its methods (405 with ``Allow``
otherwise, HEAD included) and no other path (a trailing slash is a 404, never a redirect). No
cookie is ever set; CORS is off unless ``cors_origins`` names origins.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from contextlib import aclosing, suppress
from contextvars import ContextVar
from typing import Any, Final, final
from urllib.parse import unquote

import trio
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from effectagent.core import (
    ApprovalRequest,
    ModelResponseRecorded,
    RunCompletedRecord,
    SecretRedactor,
)
from effectagent.effect import Layer, SchemaError, decode_json, encode
from effectagent.engine import RunListener, RunListenerService

from .._ids import new_id
from .._logging import log_warning
from ..durable import DurableError, DurableQueue, Submission
from ..durable._checks import check_secrets
from ..storage import Database, SqliteConversationLog, StorageError
from ..storage._search import SEARCH_WORDS_MOST, word_count
from . import _ledger
from ._api import (
    ENDPOINTS,
    AbortBody,
    Approvals,
    ApprovalView,
    Conversations,
    ConversationView,
    Decided,
    DecisionBody,
    Endpoint,
    Health,
    Me,
    Readiness,
    SearchHit,
    SearchResult,
    SteerBody,
    Submissions,
    SubmissionView,
    SubmitBody,
    UnknownCalls,
)
from ._auth import Principal
from ._console import console_routes
from ._events import entry_json
from ._live import LiveFeed, LiveText, RunListeners, check_listeners, send_live
from ._metrics import ServeMetrics, _TokenListener
from ._openapi import openapi_document
from ._problems import MEDIA_TYPE, Problem, no_conversation, problem_of
from ._quota import QuotaBook, retry_after
from ._settings import ServeSettings
from ._sse import COMMENT, event_bytes, resume_after
from ._tails import Tails

__all__ = ["ServeApi"]

Handler = Callable[[Request, Principal], Awaitable[Response]]

_MAX_ID: Final = 200
_MAX_KEY: Final = 255
_LISTED: Final = 500
_DRAINED: Final = 1024 * 1024
_MOST_OVERDUE: Final = 86_400  # ?older_than=: seconds, a day at most
_SECURITY_HEADERS: Final = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


#: The request headers the API reads, each of which a request may carry once (RFC 9110 §5.3): of
#: two, the API would read one where a proxy in front of it might read the other — act as
#: another principal, say, than the one the proxy let through. (So with a query parameter.)
_SINGLE_HEADERS: Final = ("Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID")


def _given_once(endpoint: Endpoint, request: Request) -> None:
    """Refuse (400) a request carrying one of :data:`_SINGLE_HEADERS`, or a query parameter of
    ``endpoint``, twice — named, never quoted (it may be a token)."""
    for name in _SINGLE_HEADERS:
        if len(request.headers.getlist(name)) > 1:
            raise Problem(
                "bad-request", f"the request has the {name} header twice: each may appear once"
            )
    for name in endpoint.query:
        if len(request.query_params.getlist(name)) > 1:
            raise Problem(
                "bad-request", f"the query gives {name} twice: each parameter may appear once"
            )


def _identifier(name: str, value: str, redact: Callable[[str], str], limit: int = _MAX_ID) -> str:
    """``value``, refused (400) unless it is 1 to ``limit`` printable characters without
    surrounding spaces, holding none of the runtime's secrets (``redact`` would change it): an
    identifier is kept and answered as it is (a ledger row, a receipt, every event), where it
    could not be redacted without becoming another."""
    if not value or len(value) > limit or not value.isprintable() or value != value.strip():
        raise Problem(
            "bad-request",
            f"the {name} must be 1 to {limit} printable characters without surrounding spaces",
        )
    if redact(value) != value:
        raise Problem(
            "bad-request", f"the {name} holds one of the runtime's secrets: choose another"
        )
    return value


class _JSONResponse(JSONResponse):
    """Starlette's JSON answer, always UTF-8: text that is not Unicode (a lone UTF-16 surrogate,
    which a JSON escape can put in a record — a run's answer, say) is sent as a JSON escape
    instead of failing the answer."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            text = json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
            return text.encode()


def _json(value: object, status: int = 200) -> Response:
    return _JSONResponse(encode(value), status_code=status, headers=_SECURITY_HEADERS)


#: The longest detail a problem document gives (a schema error's explanation can be long).
_MAX_DETAIL: Final = 2000


def _unchanged(text: str) -> str:
    return text


def _redacted_path(path: str, redact: Callable[[str], str]) -> str:
    """``path`` with the secrets ``redact`` knows replaced — also one spelled with percent
    escapes (then the path is given decoded, redacted)."""
    shown = redact(path)
    if "%" not in path:
        return shown
    decoded = unquote(path)
    redacted = redact(decoded)
    return redacted if redacted != decoded else shown


def _problem(
    problem: Problem, instance: str, redact: Callable[[str], str] = _unchanged
) -> Response:
    """The problem document answering a request to ``instance``: its detail and instance
    redacted with ``redact`` (a detail may quote what the client sent: a name, a field, a
    path)."""
    headers = dict(_SECURITY_HEADERS)
    headers.update(problem.headers)
    if problem.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="effectagent"'
    document = problem.document(_redacted_path(instance, redact))
    # Cut after redacting: a cut first could keep the start of a secret.
    document["detail"] = redact(document["detail"])[:_MAX_DETAIL]
    return _JSONResponse(
        document,
        status_code=problem.status,
        headers=headers,
        media_type=MEDIA_TYPE,
    )


class _OnceOnly(Exception):
    """A member of a JSON object named twice (raised while the body is read again)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, value in pairs:
        if name in found:
            raise _OnceOnly(name)
        found[name] = value
    return found


def _unicode(value: object) -> bool:
    """Whether every text in a parsed JSON value (its members' names too) is Unicode — a lone
    UTF-16 surrogate, which a ``\\ud800`` escape makes, is not, and cannot be written as UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _strict(body: bytes) -> None:
    """Refuse (400) what the schema's decoder lets through — a member named twice (the last one
    would win: a proxy reading the first sees another request than the one served) and text that
    is not Unicode. ``body`` is JSON the decoder read already (valid, within its bounds)."""
    try:
        value = json.loads(body, object_pairs_hook=_members)
    except _OnceOnly as twice:
        raise Problem(
            "bad-request", f"the body names {twice.name!r} twice: each member may appear once"
        ) from None
    if not _unicode(value):
        raise Problem(
            "bad-request",
            "the body holds text that is not Unicode (an escape of a lone UTF-16 surrogate, "
            "\\ud800 to \\udfff without its pair): send text as UTF-8",
        )


def _view(submission_id: str, request: ApprovalRequest) -> ApprovalView:
    return ApprovalView(
        submission_id=submission_id,
        conversation_id=request.conversation_id,
        tool_call_id=request.tool_call_id,
        tool_name=request.tool_name,
        summary=request.summary,
        risk=request.risk,
        input_preview=request.input_preview,
        expires_at=request.expires_at,
    )


#: The path of the request a CORS preflight answers (for its problem document's ``instance``).
_PREFLIGHT_PATH: ContextVar[str] = ContextVar("preflight_path", default="")


#: The largest request head (request line and headers) served, in bytes: the HTTP server refuses
#: one it must buffer past this before it is whole (431), and the app one that came whole in a
#: single read — the same bound, whatever way the head arrived.
MAX_HEAD_BYTES: Final = 16 * 1024


def _head_bytes(scope: Scope) -> int:
    """The size of the request's head as HTTP/1.1 wrote it: request line, headers, blank line."""
    target = len(scope.get("raw_path") or scope["path"].encode())
    query = scope.get("query_string") or b""
    size = len(scope["method"]) + 1 + target + (1 + len(query) if query else 0) + 11 + 2
    return size + sum(len(name) + len(value) + 4 for name, value in scope["headers"])


class _HeadBound:
    """Refuse a request whose head is over :data:`MAX_HEAD_BYTES` as the server does: a bare
    431, its body empty, the connection closed. The server bounds only what it must buffer, so a
    larger head that arrived in one read reached the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _head_bytes(scope) > MAX_HEAD_BYTES:
            headers = [(b"content-length", b"0"), (b"connection", b"close")]
            await send({"type": "http.response.start", "status": 431, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


class _ProblemCORS(CORSMiddleware):
    """Starlette's CORS middleware, whose refusal of a preflight (an origin, method or header
    not allowed) is a problem document like every other refusal of the API, not plain text —
    its path redacted with ``redact`` as every problem's is."""

    def __init__(
        self,
        app: ASGIApp,
        allow_origins: Collection[str] = (),
        allow_methods: Collection[str] = ("GET",),
        allow_headers: Collection[str] = (),
        allow_credentials: bool = False,
        expose_headers: Collection[str] = (),
        redact: Callable[[str], str] = _unchanged,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        super().__init__(
            app,
            allow_origins=allow_origins,
            allow_methods=allow_methods,
            allow_headers=allow_headers,
            allow_credentials=allow_credentials,
            expose_headers=expose_headers,
        )
        self._redact = redact
        self._routes = tuple(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "OPTIONS"
            and all(route.matches(scope)[0] == Match.NONE for route in self._routes)
        ):
            # A preflight of a path nothing answers is that path's 404, as every other request
            # to it (the middleware would approve it, for a request that cannot succeed).
            await self.app(scope, receive, send)
            return
        token = _PREFLIGHT_PATH.set(str(scope.get("path", "")))
        try:
            await super().__call__(scope, receive, send)
        finally:
            _PREFLIGHT_PATH.reset(token)

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        if answer.status_code != 400:
            return answer
        refused = bytes(answer.body).decode("utf-8", "replace").removeprefix("Disallowed CORS ")
        problem = Problem("bad-request", f"this cross-origin request is not allowed ({refused})")
        headers = dict(_SECURITY_HEADERS)
        headers.update(
            (name, value)
            for name, value in answer.headers.items()
            if name not in ("content-type", "content-length")
        )
        document = problem.document(_redacted_path(_PREFLIGHT_PATH.get(), self._redact))
        document["detail"] = self._redact(document["detail"])
        return JSONResponse(
            document,
            status_code=problem.status,
            headers=headers,
            media_type=MEDIA_TYPE,
        )


class _EventStream(Response):
    """A ``text/event-stream`` answer: :meth:`ServeApi.stream` until the client disconnects or
    the service closes its streams."""

    media_type = "text/event-stream"

    def __init__(self, api: ServeApi, conversation_id: str, after: int) -> None:
        # "Connection: close": a stream's connection is never reused for another request, and
        # when the service drains and ends the stream the connection goes with it — a client
        # reconnecting at once then reaches whichever server listens now, and this one's
        # graceful shutdown does not wait on it.
        super().__init__(
            headers={**_SECURITY_HEADERS, "X-Accel-Buffering": "no", "Connection": "close"},
            media_type=self.media_type,
        )
        # A stream has no length: its end is the connection's (chunked).
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self._api = api
        self._conversation_id = conversation_id
        self._after = after

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Stream until the client disconnects (the stream is cancelled then) or the service
        closes its streams (the response is ended). Cancellation: stops at once.

        The connection is written by a task of its own (:func:`_write`), handed one event at a
        time (nothing is queued): the server writes to a connection shielded from cancellation,
        so a write to a client that stopped reading held this request — and the server's
        shutdown, which waits for it — for as long as the client kept its connection open. When
        the stream ends, this request waits a moment (:data:`_END_WAIT`, twice at most) for the
        writer to send what it holds and the stream's end, then returns whatever the writer is
        doing: the server closes a connection whose answer is not whole, which ends the write."""
        chunks, to_write = trio.open_memory_channel[bytes | None](0)
        written = trio.Event()
        trio.lowlevel.spawn_system_task(
            _write, send, self.raw_headers, to_write, written, name="serve.sse.writer"
        )
        async with chunks:
            async with trio.open_nursery() as nursery:

                async def until_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    nursery.cancel_scope.cancel()

                async def until_closing() -> None:
                    await self._api._closing.wait()  # this module's own
                    nursery.cancel_scope.cancel()

                nursery.start_soon(until_disconnect)
                nursery.start_soon(until_closing)
                try:
                    await self._api.stream(self._conversation_id, self._after, chunks.send)
                except trio.BrokenResourceError:
                    pass  # the writer ended: the client went
                except StorageError as error:
                    # Ended whole, as a drain ends it: the client reconnects with its
                    # Last-Event-ID (503 until the storage answers again). Its kind is logged,
                    # never its message.
                    log_warning("event stream ended: storage failed", error=type(error).__name__)
                nursery.cancel_scope.cancel()
            with trio.move_on_after(_END_WAIT) as waiting, suppress(trio.BrokenResourceError):
                waiting.shield = True  # the stream's end is sent whatever ended it
                await chunks.send(None)
        with trio.move_on_after(_END_WAIT):
            await written.wait()


#: How long an event stream that ends waits for its writer to take its end, and to send it.
_END_WAIT: Final = 1.0


async def _write(
    send: Any,
    headers: list[tuple[bytes, bytes]],
    chunks: trio.MemoryReceiveChannel[bytes | None],
    written: trio.Event,
) -> None:
    """Write an event stream's answer: its head, then each chunk taken from ``chunks``, then —
    on None — its end; until ``chunks`` is closed. A system task (no request waits for it: see
    :meth:`_EventStream.__call__`); it never raises: a connection gone ends it.

    Cancellation: stops (the run ends)."""
    try:
        async with chunks:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async for chunk in chunks:
                if chunk is None:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except BaseException:  # a system task must not raise; the client went
        return
    finally:
        written.set()


@final
class ServeApi:
    """The API over ``database``'s durable queue; :attr:`app` is the ASGI app (mount it in an app
    of your own, or serve it: ``capabilities.serve.serve``).

    ``agents``: the names submissions may give (None: any — a worker settles an unknown one
    failed). ``wake``: called after each admission (a worker in this process claims it at once
    rather than at its next poll). ``metrics``: where the service's figures go (None: nowhere).
    ``secrets``: the runtime's secrets — those its workers are given
    (``DurableWorker(secrets=...)``): the reasons of aborts and approval decisions are redacted
    with them before they are written (its :attr:`queue`'s ``secrets``), and so is every problem
    document it answers with (its detail may quote what a client sent) and the path of a
    request whose failure it logs.
    ``clock``: the monotonic clock quotas are measured on. :attr:`live`: the live text of the
    runs whose worker has :meth:`listener` in its layer — and, on PostgreSQL, of workers in
    other processes once a :class:`~._live.LiveRelay` follows it (``relay.follow(api.live)``).

    It answers ``/readyz`` with 503 until :meth:`ready` is called (storage open, the worker's
    recovery run), and again from :meth:`drain` on, which also refuses new submissions (503);
    :meth:`close_streams` ends the event streams.
    """

    __slots__ = (
        "_closing",
        "_draining",
        "_log",
        "_quotas",
        "_ready",
        "_redact",
        "_tails",
        "app",
        "clock",
        "database",
        "live",
        "metrics",
        "queue",
        "settings",
        "wake",
    )

    def __init__(
        self,
        database: Database,
        settings: ServeSettings,
        *,
        agents: tuple[str, ...] | None = None,
        wake: Callable[[], None] | None = None,
        metrics: ServeMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        secrets: Sequence[str] = (),
    ) -> None:
        self.database = database
        self.settings = settings
        secret_list = check_secrets(secrets)  # checked (and a generator read) once
        self.queue = DurableQueue(database, agents=agents, secrets=secret_list)
        redactor = SecretRedactor(secret_list)
        self._redact: Callable[[str], str] = redactor.redact_text if redactor.active else _unchanged
        self._log = SqliteConversationLog(database)
        self._tails = Tails(self._log, settings.sse_poll)
        self.live = LiveText()
        self._quotas = QuotaBook(settings.quota, settings.quotas)
        self.wake = wake
        self.metrics = metrics
        self.clock = clock
        self._ready = False
        self._draining = False
        self._closing = trio.Event()
        routes: list[BaseRoute] = [
            Route(
                endpoint.path,
                self._wrap(endpoint, getattr(self, "_" + endpoint.name)),
                methods=[endpoint.method],
            )
            for endpoint in ENDPOINTS
        ]
        routes.append(Route("/openapi.json", self._openapi, methods=["GET"]))
        routes.extend(console_routes())
        for route in routes:
            # Exactly the methods the document lists: Starlette adds HEAD to a GET route, which
            # on an event stream would start a stream for nobody to read.
            if isinstance(route, Route) and route.methods is not None:
                route.methods.discard("HEAD")
        middleware = [Middleware(_HeadBound)] + (
            [
                Middleware(
                    _ProblemCORS,
                    redact=self._redact,
                    routes=routes,
                    allow_origins=list(settings.cors_origins),
                    allow_methods=["GET", "POST"],
                    # Last-Event-ID: a page's script resuming an event stream sends it
                    allow_headers=[
                        "Authorization",
                        "Content-Type",
                        "Idempotency-Key",
                        "Last-Event-ID",
                    ],
                    # what a refusal tells a program beyond its body (a page's script reads
                    # only the headers named here)
                    expose_headers=["Retry-After", "Allow", "WWW-Authenticate"],
                    allow_credentials=False,
                )
            ]
            if settings.cors_origins
            else []
        )
        self.app = Starlette(
            routes=routes,
            middleware=middleware,
            exception_handlers={HTTPException: self._http_error},
        )
        # A path with a trailing slash added is a 404: Starlette's redirect to the path without
        # it builds its Location from the request's Host header.
        self.app.router.redirect_slashes = False

    # ---- the service's state -------------------------------------------------------------------

    def ready(self) -> None:
        """Storage is open and recovery ran: ``/readyz`` answers 200 (unless draining)."""
        self._ready = True

    def drain(self) -> None:
        """Stop admitting: submissions are refused with 503 and ``/readyz`` answers 503."""
        self._draining = True

    @property
    def draining(self) -> bool:
        """Whether :meth:`drain` was called."""
        return self._draining

    def close_streams(self) -> None:
        """End every event stream (their clients reconnect with ``Last-Event-ID`` elsewhere) —
        one whose client stopped reading too: its connection is closed a second or two later."""
        self._closing.set()
        self.live.close()

    def listener(self, *also: RunListener) -> Layer:
        """A Layer providing the engine's ``RunListenerService`` for a worker in this process
        (``serve(..., worker=...)``; give it to the worker's layer): the runs' text deltas
        reach the event streams as they are streamed (:attr:`live`), and, with :attr:`metrics`,
        the runs' tokens are counted.

        A runtime has one run listener: a layer merged after this one that provides another
        (``Telemetry.layer()``, say) replaces it, and this one replaces an earlier one. Give the
        others here instead — ``api.listener(telemetry)`` — and each sees every event (see
        :class:`RunListeners`). Raises ``TypeError`` for one that is not a run listener."""
        check_listeners(also)
        found: RunListener = self.live.listener()
        if self.metrics is not None:
            found = RunListeners(found, _TokenListener(self.metrics.tokens))
        if also:
            found = RunListeners(found, *also)
        return Layer.succeed(RunListenerService, found, name="serve_listener")

    # ---- the wrapper -----------------------------------------------------------------------------

    def _wrap(
        self, endpoint: Endpoint, handler: Handler
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint_handler(request: Request) -> Response:
            path = request.url.path
            redact = self._redact
            try:
                _given_once(endpoint, request)
                principal = self._who(endpoint, request)
                return await handler(request, principal or Principal("anonymous"))
            except Problem as problem:
                return _problem(problem, path, redact)
            except DurableError as error:
                return _problem(problem_of(error), path, redact)
            except SchemaError as error:
                return _problem(Problem("bad-request", error.explain("the body")), path, redact)
            except UnicodeError:  # text that is not Unicode met on its way to storage
                refused = Problem("bad-request", "the request holds text that is not Unicode")
                return _problem(refused, path, redact)
            except StorageError:
                busy = Problem(
                    "unavailable",
                    "the storage is busy or failing; try again shortly",
                    headers=(("Retry-After", "1"),),
                )
                return _problem(busy, path, redact)
            except ValueError as error:  # the queue refused an argument: a sentence
                return _problem(Problem("bad-request", str(error)), path, redact)
            except Exception as error:  # a defect: its kind is logged, never its message
                log_warning(
                    "serve request failed",
                    path=_redacted_path(path, redact),
                    error=type(error).__name__,
                )
                return _problem(Problem("internal", "the service failed to answer"), path, redact)

        return endpoint_handler

    def _who(self, endpoint: Endpoint, request: Request) -> Principal | None:
        """The principal of ``request``, refused (401, 403) when the endpoint needs another."""
        principal = self.settings.tokens.resolve(request.headers.get("authorization"))
        if endpoint.access == "anyone":
            return principal
        if principal is None:
            raise Problem(
                "unauthenticated",
                "this request needs an Authorization header with a valid bearer token",
            )
        if endpoint.access == "operator" and not principal.operator:
            raise Problem("forbidden", "this operation is for operators only")
        return principal

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        name = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "bad-request")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of the first route of the path; a path may have two.
            allowed: set[str] = set()
            for route in self.app.routes:
                if isinstance(route, Route) and route.matches(request.scope)[0] != Match.NONE:
                    allowed |= route.methods or set()
            headers["Allow"] = ", ".join(sorted(allowed))
        problem = Problem(name, f"nothing answers {request.method} here", tuple(headers.items()))
        return _problem(problem, request.url.path, self._redact)

    async def _body(self, request: Request, kind: type[Any]) -> Any:
        limit = self.settings.max_body
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise Problem("unsupported-media-type", "the body must be application/json")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit + _DRAINED:
            raise Problem("body-too-large", f"the body may be at most {limit:,} bytes")
        chunks: list[bytes] = []
        size = 0
        with trio.move_on_after(self.settings.body_timeout) as reading:
            async with aclosing(request.stream()) as stream:
                async for chunk in stream:
                    size += len(chunk)
                    if size > limit + _DRAINED:
                        break  # refused unread: the connection is closed after the answer
                    if size <= limit:
                        chunks.append(chunk)
        if reading.cancelled_caught:
            # Its body unread, the connection is closed after the answer: a client sending
            # slowly, or not at all, holds neither this request nor the connection.
            raise Problem(
                "request-timeout",
                f"the body did not arrive within {self.settings.body_timeout:g} s",
                headers=(("Connection", "close"),),
            )
        # A body over the limit is read on (to _DRAINED bytes more, none kept) so that the
        # client, still sending, reads the answer: a connection closed with unread data is
        # reset, and the answer may be lost with it.
        if size > limit:
            raise Problem("body-too-large", f"the body may be at most {limit:,} bytes")
        body = b"".join(chunks)
        decoded = decode_json(kind, body)
        _strict(body)
        return decoded

    # ---- who sees what -------------------------------------------------------------------------

    async def _owner(self, conversation_id: str, principal: Principal, *, new: bool) -> None:
        """Refuse (404) a conversation ``principal`` may not see: one with no submission (unless
        ``new``: theirs to start) or another's — but an operator sees every one."""
        owner = await _ledger.owner(self.database, conversation_id)
        if owner is None and (new or principal.operator):
            return  # an operator reads a subagent's conversation (no submission of its own)
        if owner is None or (owner != principal.name and not principal.operator):
            raise no_conversation(conversation_id)

    def _path_conversation(self, request: Request) -> str:
        """The conversation ID the request's path names, checked (see :func:`_identifier`)."""
        return _identifier("conversation ID", request.path_params["conversation_id"], self._redact)

    async def _submission(self, submission_id: str, principal: Principal) -> Submission:
        _identifier("submission ID", submission_id, self._redact)
        submission = await self.queue.status(submission_id)
        try:
            await self._owner(submission.conversation_id, principal, new=False)
        except Problem:
            raise Problem("not-found", f"there is no submission {submission_id!r}") from None
        return submission

    # ---- admission -------------------------------------------------------------------------------

    async def _admit(
        self, request: Request, principal: Principal, text: str, agent: str | None, mode: Any
    ) -> Response:
        """Admit a submission (:meth:`_admitting`), counting a refusal in the metrics by its
        reason: ``quota``, ``draining``, or the problem type of another refusal
        (``idempotency-conflict``, ``unknown-agent``, ``not-found``, ``bad-request``,
        ``unavailable`` for a storage failure)."""
        try:
            return await self._admitting(request, principal, text, agent, mode)
        except Problem as problem:
            if problem.name != "quota-exceeded":  # counted as "quota" where it is refused
                self._refused(principal, "draining" if self._draining else problem.name)
            raise
        except DurableError as error:
            self._refused(principal, problem_of(error).name)
            raise
        except StorageError:
            self._refused(principal, "unavailable")
            raise
        except ValueError:  # UnicodeError included: the queue refused an argument
            self._refused(principal, "bad-request")
            raise

    def _refused(self, principal: Principal, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.refused(principal.name, reason)

    async def _admitting(
        self, request: Request, principal: Principal, text: str, agent: str | None, mode: Any
    ) -> Response:
        conversation_id = self._path_conversation(request)
        if self._draining:
            raise Problem(
                "unavailable",
                "the service is shutting down and admits nothing more; submit to another instance",
                headers=(("Retry-After", "5"),),
            )
        given = request.headers.get("idempotency-key")
        key = (
            new_id("key")
            if given is None
            else _identifier("Idempotency-Key", given, self._redact, _MAX_KEY)
        )
        wait = self._quotas.take(principal.name, self.clock())
        if wait > 0:
            seconds = retry_after(wait)
            if self.metrics is not None:
                self.metrics.refused(principal.name, "quota")
            raise Problem(
                "quota-exceeded",
                f"{principal.name} submitted more than its quota allows; try again in {seconds} s",
                headers=(("Retry-After", str(seconds)),),
            )
        started = time.monotonic()
        try:
            # Another's conversation is refused in the admitting transaction (ConversationOwned:
            # the 404 of a missing one), so two principals starting one cannot both be admitted.
            receipt = await self.queue.submit(
                agent or self.settings.agent,
                text,
                conversation_id=conversation_id,
                idempotency_key=key,
                principal=principal.name,
                mode=mode,
                owned_by=None if principal.operator else principal.name,
            )
        except BaseException:
            # Not admitted (the queue's refusals — 400, 404, 409, 422 — a storage failure, a
            # client gone): only admissions and repeats use up the quota.
            self._quotas.give_back(principal.name, self.clock())
            raise
        if self.metrics is not None:
            self.metrics.admitted(principal.name, time.monotonic() - started)
        if self.wake is not None:
            self.wake()
        return _json(receipt, 202)

    async def _submit(self, request: Request, principal: Principal) -> Response:
        body: SubmitBody = await self._body(request, SubmitBody)
        return await self._admit(request, principal, body.text, body.agent, body.mode)

    async def _steer(self, request: Request, principal: Principal) -> Response:
        body: SteerBody = await self._body(request, SteerBody)
        mode = "join" if body.kind == "steering" else "queue"
        return await self._admit(request, principal, body.text, body.agent, mode)

    # ---- reading ---------------------------------------------------------------------------------

    async def _health(self, request: Request, principal: Principal) -> Response:
        return _json(Health())

    async def _readiness(self, request: Request, principal: Principal) -> Response:
        ready = self._ready and not self._draining
        return _json(Readiness(ready=ready, draining=self._draining), 200 if ready else 503)

    async def _me(self, request: Request, principal: Principal) -> Response:
        return _json(Me(principal.name, principal.operator))

    async def _submissions(self, request: Request, principal: Principal) -> Response:
        conversation_id = self._path_conversation(request)
        await self._owner(conversation_id, principal, new=False)
        return _json(Submissions(await self.queue.submissions(conversation_id)))

    async def _status(self, request: Request, principal: Principal) -> Response:
        submission = await self._submission(request.path_params["submission_id"], principal)
        waiting: tuple[ApprovalView, ...] = ()
        answer: Any = None
        if submission.status == "suspended":
            found = await self.queue.waiting(submission.submission_id)
            waiting = tuple(_view(submission.submission_id, r) for r in found)
        elif submission.settled:
            entry = await self.queue.answer(submission.submission_id)
            if entry is not None and isinstance(entry.record, RunCompletedRecord):
                answer = entry.record.output
        return _json(SubmissionView(submission, waiting, answer))

    async def _approvals(self, request: Request, principal: Principal) -> Response:
        views: list[ApprovalView] = []
        owner = None if principal.operator else principal.name
        for submission_id in await _ledger.with_status(
            self.database, "suspended", limit=_LISTED, owner=owner
        ):
            try:
                found = await self.queue.waiting(submission_id)
            except DurableError:
                continue  # gone meanwhile
            views.extend(_view(submission_id, r) for r in found)
        return _json(Approvals(tuple(views)))

    async def _conversations(self, request: Request, principal: Principal) -> Response:
        rows = await _ledger.conversations(
            self.database, None if principal.operator else principal.name, limit=_LISTED
        )
        return _json(Conversations(tuple(ConversationView(*row) for row in rows)))

    async def _search(self, request: Request, principal: Principal) -> Response:
        words = request.query_params.get("q", "").split()
        if not words or len(words) > 16 or not all(word.isprintable() for word in words):
            raise Problem("bad-request", "q must hold 1 to 16 printable words to search for")
        if word_count(words) > SEARCH_WORDS_MOST:  # a.b.c… is one word here, many to the log
            raise Problem(
                "bad-request",
                f"q must hold at most {SEARCH_WORDS_MOST:,} words, each part of a word counted "
                f"(e-mail is two)",
            )
        limit = self._count(request, "limit", self.settings.search_limit)
        limit = min(limit, self.settings.search_limit)
        found = await self._log.search(words, limit=limit if principal.operator else limit * 4)
        owners: dict[str, str | None] = {}
        hits: list[SearchHit] = []
        for said in found.said:
            if not principal.operator:
                if said.conversation_id not in owners:
                    owners[said.conversation_id] = await _ledger.owner(
                        self.database, said.conversation_id
                    )
                if owners[said.conversation_id] != principal.name:
                    continue
            hits.append(SearchHit(said.conversation_id, said.seq, said.who, said.at, said.text))
        return _json(SearchResult(tuple(hits[:limit])))

    @staticmethod
    def _count(request: Request, name: str, default: int, most: int = 10_000) -> int:
        given = request.query_params.get(name)
        if given is None:
            return default
        if (
            not (given.isascii() and given.isdigit())
            or len(given.lstrip("0")) > len(str(most))  # no int() of a huge string
            or not 0 < int(given) <= most
        ):
            raise Problem("bad-request", f"{name} must be a whole number from 1 to {most:,}")
        return int(given)

    async def _unknown(self, request: Request, principal: Principal) -> Response:
        return _json(UnknownCalls((await self.queue.unknown())[:_LISTED]))

    async def _overdue(self, request: Request, principal: Principal) -> Response:
        older_than = self._count(request, "older_than", 3600, _MOST_OVERDUE)
        before = time.time() - older_than
        rows = await _ledger.unsettled_before(self.database, before, limit=_LISTED)
        return _json(Submissions(tuple([await self.queue.status(s) for s in rows])))

    async def _dead(self, request: Request, principal: Principal) -> Response:
        rows = await _ledger.with_status(self.database, "dead", limit=_LISTED)
        return _json(Submissions(tuple([await self.queue.status(s) for s in rows])))

    # ---- commands --------------------------------------------------------------------------------

    async def _abort(self, request: Request, principal: Principal) -> Response:
        submission = await self._submission(request.path_params["submission_id"], principal)
        body: AbortBody = await self._body(request, AbortBody)
        aborted = await self.queue.abort(
            submission.submission_id, author=principal.name, reason=body.reason
        )
        return _json(aborted)

    async def _decide(self, request: Request, principal: Principal) -> Response:
        submission = await self._submission(request.path_params["submission_id"], principal)
        body: DecisionBody = await self._body(request, DecisionBody)
        _identifier("tool call ID", body.tool_call_id, self._redact)
        decided, left = await self.queue.decide(
            submission.submission_id,
            body.tool_call_id,
            body.approved,
            author=principal.name,
            reason=body.reason,
        )
        if not left and self.wake is not None:
            self.wake()
        return _json(Decided(decided, left))

    async def _retry(self, request: Request, principal: Principal) -> Response:
        submission = await self._submission(request.path_params["submission_id"], principal)
        retried = await self.queue.retry(submission.submission_id)
        if self.wake is not None:
            self.wake()
        return _json(retried)

    # ---- events ----------------------------------------------------------------------------------

    async def _events(self, request: Request, principal: Principal) -> Response:
        conversation_id = self._path_conversation(request)
        try:
            after = resume_after(
                request.headers.get("last-event-id"), request.query_params.get("after")
            )
        except ValueError as error:
            raise Problem("bad-request", str(error)) from None
        await self._owner(conversation_id, principal, new=False)
        if self._closing.is_set():
            # The streams were ended (a drain): a stream opened now would end at once, empty,
            # as if the client had every entry — it is told to reconnect elsewhere instead.
            raise Problem(
                "unavailable",
                "the service is shutting down and streams no more events; reconnect with "
                "Last-Event-ID to another instance",
                headers=(("Retry-After", "5"),),
            )
        return _EventStream(self, conversation_id, after)

    async def stream(
        self, conversation_id: str, after: int, send: Callable[[bytes], Awaitable[None]]
    ) -> None:
        """Send the conversation's entries after ``after``, then each new one as it is appended,
        until :meth:`close_streams` (or the caller is cancelled: the client went), and between
        them the live text of its runs (events without ``id``, before the response recorded
        with the whole text; what came before a response is dropped once it is sent). Only
        live text is queued for a slow client, within a bound (:mod:`._live`): ``send`` waits
        for the connection to take each event; the log is read a page at a time (``sse_page``
        entries at most, so a client resuming from the start of a long conversation holds one
        page, never the whole log), and read again only once what the last read returned was
        sent — at once while pages come full, otherwise only when its end moved
        (:class:`~._tails.Tails`: one read a conversation a poll interval, however many clients
        follow it).

        Cancellation: stops at once; what was sent was whole events."""
        settings = self.settings
        last = after
        quiet_since = trio.current_time()
        ahead = True  # read at once; then only when the log's end moved past what was sent
        async with self._tails.following(conversation_id):
            with self.live.subscribe(conversation_id) as feed:
                if after > 0:
                    await self._recorded_before(feed, conversation_id, after)
                while not self._closing.is_set():
                    if await send_live(feed, send):
                        quiet_since = trio.current_time()
                    if ahead:
                        entries = await self._log.entries(
                            conversation_id, after=last, limit=settings.sse_page
                        )
                        read = self.live.stamp  # live text published so far came before ...
                        for entry in entries:
                            data = entry_json(entry)
                            await send(event_bytes(entry.seq, data["kind"], data))
                            last = entry.seq
                            if isinstance(entry.record, ModelResponseRecorded):
                                # ... its response; text of its turn coming later (from
                                # another process, through a LiveRelay) is left out too
                                record = entry.record
                                feed.forget(record.run_id, read, record.turn)
                        if entries:
                            quiet_since = trio.current_time()
                            continue
                    if trio.current_time() - quiet_since >= settings.sse_heartbeat:
                        await send(COMMENT)
                        quiet_since = trio.current_time()
                    with trio.move_on_after(settings.sse_poll):
                        await feed.wait()  # live text, or the streams close
                    ahead = await self._tails.last(conversation_id) > last

    async def _recorded_before(self, feed: LiveFeed, conversation_id: str, after: int) -> None:
        """A stream resumed after ``after``: the responses the client has (those of the last
        page up to it) are told to ``feed``, so text of their turns that arrives late (from
        another process, through a LiveRelay) is left out as it is for a stream that sent them.

        Cancellation: as the log's read."""
        start = max(0, after - self.settings.sse_page)
        for entry in await self._log.entries(conversation_id, after=start, limit=after - start):
            record = entry.record
            if entry.seq <= after and isinstance(record, ModelResponseRecorded):
                feed.forget(record.run_id, 0, record.turn)

    async def _openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(), headers=_SECURITY_HEADERS)

"""The streaming loop every adapter shares: open the SDK's raw streaming response, split its body
into server-sent events, decode each event's JSON, hand it to the provider's decoder, yield the
parts — and turn every way this can fail into a typed :class:`~effectagent.ai.AiError`.

What the SDK is used for: building and sending the request (auth, base URL, headers, timeouts),
and turning an HTTP error status into its exception, which this loop maps with
:func:`~effectagent.providers._errors.error_from_status`. The body of a successful response is read
as raw bytes (``with_streaming_response``) and decoded here (:mod:`~effectagent.providers._sse`), so
the SDK's pydantic event classes are never built and never leave the adapter.

Failures: a request the SDK cannot encode (text with a lone surrogate, a header that is not
ASCII) → ``InvalidModelRequest``, nothing sent; an HTTP error status → its typed error; any other
error of the SDK → ``ProviderError``;
a connection that cannot be made or is lost
(before or during the body) → ``ModelNetworkError`` — unless the decoder says the model had
finished (a ``finished`` attribute: Gemini's stream has no end event, only a finish reason in its
last one), when it is the end of the body; a 200 that is not an event stream, bytes that
are not UTF-8, data that is not JSON (or JSON nested deeper than :data:`MAX_EVENT_DEPTH` levels),
events that break the provider's format, a body that ends before the response is complete →
``MalformedResponse``; a line or event longer than ``max_event_bytes`` → ``ResponseTooLarge``
(the stream is stopped there); an error the provider reports inside the stream → its typed
error. Each error is raised with no exception chained to it (no SDK object,
request or header travels with it) and with the API key scrubbed from its message.

Cancellation: the loop waits on the network between parts; when it is cancelled, or the consumer
closes the iterator early, the HTTP response is closed — the connection is dropped, so the server
sees the client disconnect — shielded, within a bound, before the cancellation continues.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Protocol, final

import attrs
import trio

from effectagent.ai import (
    AiError,
    InvalidModelRequest,
    MalformedResponse,
    ModelNetworkError,
    ProviderError,
    ResponsePart,
    ResponseTooLarge,
    format_bytes,
)
from effectagent.effect import SchemaError, SchemaLimits, decode_json

from ._errors import error_from_payload, error_from_status, scrub, scrub_error
from ._sse import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, ServerSentEvent, SSEDecoder

__all__ = ["MAX_EVENT_DEPTH", "EventDecoder", "SdkErrors", "stream_parts"]

#: How long a finished response may keep its body open before the connection is dropped.
_DRAIN_SECONDS = 0.25
#: How long closing a response may take (shielded from cancellation).
_CLOSE_SECONDS = 5.0
#: How much of a 200 that is not an event stream is read, to find the error it may hold.
_NOT_A_STREAM_BYTES = 64 * 1024
_NOT_JSON = object()
#: How deeply an event's JSON may nest: far more than any provider's events do, and far less than
#: would make the parser recurse into trouble (checked before parsing, like tool arguments).
MAX_EVENT_DEPTH: Final = 64
#: An event's data is bounded by the event-stream decoder already: only its depth is checked here.
_EVENT_LIMITS: Final = SchemaLimits(max_depth=MAX_EVENT_DEPTH, max_bytes=1 << 50, max_items=1 << 50)


class EventDecoder(Protocol):
    """A provider's pure mapping from decoded events to response parts."""

    @property
    def complete(self) -> bool:
        """Whether the finish part has been produced."""
        ...

    def feed(self, event: object) -> list[ResponsePart]:
        """The parts one decoded event completes."""
        ...

    def end(self) -> list[ResponsePart]:
        """The end of the body (raises ``MalformedResponse`` when the response is incomplete)."""
        ...


class DoneAware(EventDecoder, Protocol):
    """A decoder of a stream that ends with a ``[DONE]`` marker (Chat Completions)."""

    def done(self) -> list[ResponsePart]:
        """The ``[DONE]`` marker."""
        ...


@final
@attrs.frozen
class SdkErrors:
    """The SDK's exception classes the loop tells apart (imported by the adapter, lazily)."""

    status: type[BaseException]
    connection: tuple[type[BaseException], ...]
    transport: tuple[type[BaseException], ...]
    decoding: tuple[type[BaseException], ...] = ()
    #: The SDK's base error class: anything else it raises becomes a ``ProviderError``.
    base: tuple[type[BaseException], ...] = ()


async def stream_parts(
    open_response: Callable[[], AbstractAsyncContextManager[Any]],
    decoder: EventDecoder,
    *,
    provider: str,
    errors: SdkErrors,
    secrets: Iterable[str],
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> AsyncIterator[ResponsePart]:
    """Open the response with ``open_response()`` (an SDK ``with_streaming_response`` call) and
    yield the parts ``decoder`` makes of its events. ``max_event_bytes`` bounds each line and each
    event of the body. See the module notes for errors.

    Cancellation: a checkpoint at each network read; on cancellation or an early ``aclose`` the
    HTTP response is closed (shielded, bounded), so the server sees the disconnect.
    """
    if not getattr(secrets, "key_sendable", True):  # a key from the environment (Secrets)
        raise InvalidModelRequest(
            f"{provider}: the API key holds a control character or one that is not ASCII, "
            "which no request can carry (its value is not shown); nothing was sent"
        )
    secrets = tuple(secrets)
    manager = open_response()
    failure: AiError | None = None
    try:
        response = await manager.__aenter__()
    except UnicodeEncodeError as exc:  # raised as the SDK encodes the request: nothing was sent
        failure = InvalidModelRequest(
            f"{provider}: the request holds a character that cannot be sent ({exc.encoding}: "
            f"{exc.reason}) — text with a lone surrogate (bytes that were not UTF-8, decoded "
            "with surrogateescape), or a header such as the API key that is not ASCII; nothing "
            "was sent"
        )
    except errors.status as exc:
        failure = _status_failure(provider, exc)
    except errors.connection as exc:
        failure = ModelNetworkError(f"{provider}: could not get a response ({_describe(exc)})")
    except errors.base as exc:
        failure = ProviderError(f"{provider}: {_describe(exc)}")
    if failure is not None:
        raise scrub_error(failure, secrets)
    http = response.http_response
    chunks: AsyncIterator[bytes] | None = None
    exhausted = False
    try:
        content_type = str(http.headers.get("content-type", "")).lower()
        chunks = http.aiter_bytes()
        if content_type and not content_type.startswith("text/event-stream"):
            failure, exhausted = await _not_a_stream(provider, chunks, content_type, errors)
            raise scrub_error(failure, secrets)
        sse = SSEDecoder(max_line_bytes=max_event_bytes, max_event_bytes=max_event_bytes)
        done = getattr(decoder, "done", None)
        while True:
            chunk: bytes | None
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                chunk = None
            except errors.transport as exc:
                if getattr(decoder, "finished", False):
                    # The model said it had finished (Gemini's finish reason, which only the
                    # last event carries): only the end of the body was lost — not the answer.
                    chunk = None
                else:
                    # A read timeout is a transport error too: the server went silent, not away.
                    what = "went silent past the timeout" if _timed_out(exc) else "was lost"
                    failure = ModelNetworkError(
                        f"{provider}: the connection {what} mid-stream ({_describe(exc)})"
                    )
            except errors.decoding as exc:
                failure = MalformedResponse(f"{provider}: undecodable body ({_describe(exc)})")
            if failure is not None:
                exhausted = True
                raise scrub_error(failure, secrets)
            if chunk is None:
                exhausted = True
            try:
                events = sse.finish() if chunk is None else sse.feed(chunk)
                parts = _parts(decoder, done, events, secrets)
                if chunk is None:
                    parts.extend(decoder.end())
            except AiError as error:
                failure = error
            except UnicodeDecodeError:
                failure = MalformedResponse(f"{provider}: the event stream is not UTF-8")
            except EventTooLarge as error:
                failure = ResponseTooLarge(
                    f"{provider}: a server-sent {error.what} grew past "
                    f"{format_bytes(error.limit)}, the most one may be; the stream was stopped "
                    "there",
                    error.limit,
                )
            if failure is not None:
                raise scrub_error(failure, secrets)
            for part in parts:
                yield part
            if chunk is None or decoder.complete:
                if chunk is not None:
                    exhausted = await _drain(chunks)
                return
    finally:
        await _close(manager, http, chunks, exhausted)


def _parts(
    decoder: EventDecoder,
    done: Callable[[], list[ResponsePart]] | None,
    events: list[ServerSentEvent],
    secrets: tuple[str, ...],
) -> list[ResponsePart]:
    """The parts ``events`` make. An event that is not JSON is :class:`MalformedResponse`
    quoting its start — scrubbed of ``secrets`` before it is cut, so that a cut never leaves
    the start of a secret behind."""
    parts: list[ResponsePart] = []
    for event in events:
        data = event.data
        if not data:
            continue
        if data == "[DONE]":
            if done is not None:
                parts.extend(done())
            continue
        value = _loads(data)
        if value is _NOT_JSON:
            raise MalformedResponse(
                f"an event's data is not JSON (or nests deeper than {MAX_EVENT_DEPTH} levels): "
                f"{scrub(data, secrets)[:60]!r}"
            )
        parts.extend(decoder.feed(value))
    return parts


def _loads(data: str | bytes) -> object:
    """JSON text as its value — or :data:`_NOT_JSON` for text that is not JSON, or nests deeper
    than :data:`MAX_EVENT_DEPTH` levels (checked before parsing: a parser that recursed that
    deep would fail with a ``RecursionError``, or worse)."""
    try:
        return decode_json(Any, data, limits=_EVENT_LIMITS)
    except SchemaError:
        return _NOT_JSON


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is an HTTP client's timeout (``httpx2.ReadTimeout`` and its kin)."""
    return isinstance(exc, TimeoutError) or type(exc).__name__.endswith("Timeout")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _status_failure(provider: str, exc: BaseException) -> AiError:
    """The typed error of an SDK's HTTP-status exception: ``status_code`` and ``body`` (the
    ``openai`` and ``anthropic`` SDKs) or ``code`` and ``details`` (``google-genai``), and the
    headers of its ``response``."""
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(exc, "code", None)
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    body = getattr(exc, "body", None)
    if body is None:
        body = getattr(exc, "details", None)
    if not isinstance(status, int) or isinstance(status, bool):
        return error_from_payload(provider, body)
    return error_from_status(provider, status, headers, body)


async def _not_a_stream(
    provider: str, chunks: AsyncIterator[bytes], content_type: str, errors: SdkErrors
) -> tuple[AiError, bool]:
    """A 200 that is not an event stream: its error if the body says one, else malformed — and
    whether the body was read to its end. At most :data:`_NOT_A_STREAM_BYTES` of the body are
    read (an error object is far shorter): a server answering with a page, a file or an endless
    body is neither held in memory nor waited for.

    Cancellation: reads the start of the body; cancellable there, the caller closes the
    response."""
    raw = bytearray()
    exhausted = False
    try:
        async for piece in chunks:
            raw += piece
            if len(raw) > _NOT_A_STREAM_BYTES:
                break
        else:
            exhausted = True
    except errors.transport:
        return ModelNetworkError(f"{provider}: the connection was lost"), True
    except errors.decoding as exc:
        return MalformedResponse(f"{provider}: undecodable body ({_describe(exc)})"), True
    body = _loads(bytes(raw)) if exhausted else _NOT_JSON
    if isinstance(body, dict) and body.get("error"):
        return error_from_payload(provider, body), exhausted
    return MalformedResponse(
        f"{provider}: expected an event stream, got {content_type!r}"
    ), exhausted


async def _drain(chunks: AsyncIterator[bytes]) -> bool:
    """Read what follows the end of a finished response (usually nothing but the end of the
    chunked body), so the connection can serve the next request; give up after a short bound.
    True when the body was read to its end.

    Cancellation: cancellable while it reads; the caller's ``finally`` then drops the
    connection."""
    with trio.move_on_after(_DRAIN_SECONDS):
        try:
            async for _ in chunks:
                pass
        except Exception:  # a finished response: whatever the connection does now is moot
            return True
        return True
    return False


async def _close(
    manager: AbstractAsyncContextManager[Any],
    http: Any,
    chunks: AsyncIterator[bytes] | None,
    exhausted: bool,
) -> None:
    """Close the response, shielded and bounded. A body not read to its end is closed first —
    which drops the connection — and its byte iterator then run out (it fails at once), so no
    generator of the HTTP stack is left suspended.

    Cancellation: shielded, with its own deadline; it always finishes."""
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + _CLOSE_SECONDS
        if chunks is not None and not exhausted:
            await http.aclose()
            try:
                while True:
                    await chunks.__anext__()
            except Exception:  # StopAsyncIteration or the closed connection's error
                pass
        await manager.__aexit__(None, None, None)

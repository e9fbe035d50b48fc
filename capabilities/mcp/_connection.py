"""An open connection to one MCP server: its tools as ordinary ``Tool``s, and its resources and
prompts as a small API of their own.

Design notes
------------
The SDK's session needs tasks of its own for as long as the connection is open (the transport's
pipe readers and writers, the receive loop). They all run in one *host task* that :func:`connect`
starts in a nursery of its own: the host enters the transport and the session, performs the
handshake and the first listing, reports itself started, and then waits for the connection to
be closed, re-listing tools whenever the server says its list changed. Everything the SDK opens
is therefore entered and left in the same task, in order — and leaving :func:`connect` closes the
session and the transport (for stdio: the process is stopped, then killed) before it returns.

The SDK (``mcp``, about 0.8 s to import) is imported inside the functions that need it, never
when ``capabilities`` is imported.

The protocol spoken is the handshake era's (``initialize``; 2025-11-25 with the SDK 2.3), which
every current server understands and which delivers ``notifications/tools/list_changed`` on the
connection itself.

Calls: a tool call is sent on the shared session; a wait longer than ``call_timeout``, or a
connection that drops while the call is out, leaves the call's effect unknown: the handler raises
``OutcomeUnknown`` and the engine settles the call as ``ToolUnknownOutcome`` — unless the
transport knows the request never ran (over streamable HTTP: it could not connect, or the
server no longer knows the session), which is ``McpUnavailable`` and a lost connection.
Nothing is ever retried — not even a call to a tool that says it is idempotent — and nothing
is treated as exactly-once; a lost connection stays lost until a new one is opened.

Listings: the tools are listed when the connection opens and again whenever the server sends
``notifications/tools/list_changed`` (by the host task, one listing at a time, their starts at
least ``relist_interval`` apart; the answer is read tool by tool and bounded by the listing limits
of ``McpLimits``, see ``_listing``). A call during which such a notification arrived — before its
answer, as when the tool itself changed the list — waits for the re-listing that covers it to
finish (at most ``call_timeout``) before it returns, so the engine's next turn, which takes the
connection's snapshot, sees the new list. "Before its answer" is the order the client reads: over
stdio the order the server wrote; over streamable HTTP only a notification related to the call
shares the call's stream — an unrelated one comes on the standalone stream, in no order with it.
The engine needs no hook for this: the batch that made the call settles only when the call has
returned.

Every request carries an id of ours (``tools/list`` its own; a call and the resource and prompt
requests through the tagging dispatcher, ``_dispatcher``), so an answer the transport could not
parse — which the SDK drops, handing ``_handle_message`` the parser's error instead — fails the
request at once with the parser's reason, instead of leaving it to wait out its timeout (and a
call then reads as one whose effect nobody knows, when the server did answer). Such a call is a
malformed result: the engine settles it as a defect of the remote tool.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, suppress
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, final

import trio

from effectagent.ai import (
    Handler,
    OutcomeUnknown,
    Tool,
    ToolAnnotations,
    ToolCallContext,
    Toolkit,
    ToolSnapshot,
)
from effectagent.core import Agent
from effectagent.effect import Layer, trace_span

from ._catalogue import MAX_PAGES, ResourcesAndPrompts, dump_model
from ._errors import (
    McpConnectError,
    McpMalformedResult,
    McpRequestError,
    McpResultTooLarge,
    McpToolError,
    McpUnavailable,
)
from ._listing import (
    EMPTY,
    NotAListing,
    Relistings,
    build_listing,
    checked_tools,
    past_max_tools,
    tool_page,
    unreadable_answer,
    without_reserved,
)
from ._mapping import (
    ServerIdentity,
    ToolShape,
    bounded_text,
    envelope,
    error_message,
    structured_check,
)
from ._redact import argument_secrets, redacting_logs, redactor, secrets_of
from ._results import (
    SkippedTool,
)
from ._servers import HttpServer, McpServer, StdioServer
from ._tracing import request_started, span_name
from ._transport import StderrTail, open_transport

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

__all__ = ["McpConnection", "connect"]

T = TypeVar("T")

_FAILURES = (McpToolError, McpResultTooLarge, McpUnavailable)
_Check = Callable[[Mapping[str, Any]], None]
_CONNECTION_CLOSED = -32000  # the SDK's code for "the connection closed before an answer"


def _closed_by_sdk(exc: BaseException) -> bool:
    """Whether ``exc`` is the SDK's own word that the connection closed before an answer came
    ("Connection closed", or an HTTP response stream that ended or failed) — not a server's
    error of the same code: -32000 opens JSON-RPC's range of server errors, and servers use it
    for errors of their own (a rate limit, a failed backend), which leave the connection as
    it is."""
    if getattr(exc, "code", None) != _CONNECTION_CLOSED or getattr(exc, "data", None) is not None:
        return False
    message = getattr(exc, "message", None)
    return isinstance(message, str) and (
        message == "Connection closed" or message.startswith("SSE stream ")
    )


@final
class _Tag:
    """A request of the SDK's sent under an id of ours (``_tagged``), so that an answer to it the
    transport could not read fails it at once (``_handle_message`` cancels ``scope``)."""

    __slots__ = ("request_id", "scope")

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.request_id: str | None = None


#: The tag the next request the SDK sends from this task takes (see ``_tagged``).
_TAG: ContextVar[_Tag | None] = ContextVar("effectagent_mcp_tag", default=None)


@contextmanager
def _tagged(tag: _Tag) -> Iterator[None]:
    reset = _TAG.set(tag)
    try:
        yield
    finally:
        _TAG.reset(reset)


def _dispatcher(
    read: Any,
    write: Any,
    ids: Iterator[int],
    waiting: dict[str, trio.CancelScope],
    redact: Callable[[str], str],
) -> JSONRPCDispatcher[Any]:
    """The SDK's JSON-RPC dispatcher, except that the first request sent while a :class:`_Tag` is
    set goes under an id of ours, registered in ``waiting`` with the tag's scope (the SDK's
    ``ClientSession`` mints ids of its own and does not say which), and that the message of a
    protocol error the server answers with passes through ``redact`` before the SDK sees it:
    the SDK makes a span of its own for each request (under the global tracer provider) and
    gives it that message as its status."""
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
    from mcp_types import ErrorData

    class _Tagging(JSONRPCDispatcher[Any]):
        def _resolve_pending(self, request_id: Any, outcome: Any) -> None:
            if isinstance(outcome, ErrorData):
                message = redact(outcome.message)
                if message != outcome.message:
                    outcome = outcome.model_copy(update={"message": message})
            super()._resolve_pending(request_id, outcome)

        async def send_raw_request(
            self,
            method: str,
            params: Mapping[str, Any] | None,
            opts: Any = None,
            *,
            _related_request_id: Any = None,
        ) -> dict[str, Any]:
            tag = _TAG.get()
            if tag is not None and tag.request_id is None and "request_id" not in (opts or {}):
                tag.request_id = f"effectagent-{method.replace('/', '-')}-{next(ids)}"
                waiting[tag.request_id] = tag.scope
                opts = {**(opts or {}), "request_id": tag.request_id}
            return await super().send_raw_request(
                method, params, opts, _related_request_id=_related_request_id
            )

    return _Tagging(read, write)


@final
class McpConnection(ResourcesAndPrompts):
    """An open connection to an MCP server, made by :func:`connect`.

    ``server`` is the configuration it was opened with and ``identity`` who answered
    (:class:`ServerIdentity`: name, version, protocol version); ``capabilities`` is what the
    server announced (the protocol's JSON form) and ``instructions`` its usage notes, if any.

    ``tools`` are the server's tools as dynamic ``Tool``s, each with its handler bound (so
    ``Toolkit(*connection.tools).handlers()`` needs no mapping); ``skipped`` the ones that could
    not be offered, with the reason (an unusable definition, a listing bound of ``McpLimits``, a
    name :meth:`reserve` keeps for a tool of the caller's own); ``remote_names`` maps each tool's
    name to the server's.
    When the server says its list changed, the connection lists its tools again and adopts the
    new list as a whole (``version`` counts adopted listings); the engine, through
    :meth:`snapshot`, takes one listing per turn, so a batch never sees a change, and a call
    during which the server announced a change returns once it is adopted (module notes).

    The object is usable only inside the ``async with connect(...)`` block: afterwards every call
    is refused with :class:`McpUnavailable` (``lost`` says why).
    """

    __slots__ = (
        "_changed",
        "_dispatcher",
        "_dropped",
        "_identity",
        "_ids",
        "_listing",
        "_lost",
        "_redact",
        "_relist",
        "_relistings",
        "_reserved",
        "_secrets",
        "_session",
        "_shapes",
        "_stderr",
        "_stop",
        "_unreadable",
        "_unsent",
        "_version",
        "_waiting",
        "capabilities",
        "instructions",
        "server",
    )

    def __init__(self, server: McpServer) -> None:
        self.server = server
        # What no message may show (an HTTP server's header and query values, a stdio server's
        # env values and the credentials its arguments pass), and the function every message
        # made from an error passes through (``_redact``), the end of a stdio server's stderr
        # included.
        self._secrets = (
            secrets_of(server.url, server.headers)
            if isinstance(server, HttpServer)
            else secrets_of(None, {**argument_secrets(server.args), **(server.env or {})})
        )
        self._redact = redactor(self._secrets)
        self.capabilities: Mapping[str, Any] = {}
        self.instructions: str | None = None
        self._identity: ServerIdentity | None = None
        self._session: ClientSession | None = None
        self._listing = EMPTY
        # Remote definition (its JSON text) -> the Tool made from it, so an unchanged tool keeps
        # its identity (and its handler key) across listings.
        self._shapes: dict[tuple[str, str], Tool[Any, Any]] = {}
        self._version = 0
        self._changed = trio.Event()
        self._lost: str | None = None
        self._stop = trio.Event()
        self._relist: trio.MemorySendChannel[None] | None = None
        self._relistings = Relistings()
        self._dispatcher: JSONRPCDispatcher[Any] | None = None
        # The end of a stdio server's stderr, and why the transport dropped the connection.
        self._stderr: StderrTail | None = None
        self._dropped: str | None = None
        # The raw requests in flight, by the id we gave them, and why an answer to one could not
        # be read (see ``_raw_tools_page``).
        self._ids = itertools.count(1)
        self._waiting: dict[str, trio.CancelScope] = {}
        self._unreadable: dict[str, str] = {}
        # The ids of requests that never ran, as the transport found (``_request_unsent``) ->
        # whether they were sent.
        self._unsent: dict[str, bool] = {}
        # Our tool names kept for tools of the caller's own (``reserve``) -> the reason.
        self._reserved: dict[str, str] = {}

    # ---- what the server offers ----------------------------------------------------------------

    @property
    def identity(self) -> ServerIdentity:
        """Who answered the handshake."""
        if self._identity is None:
            raise RuntimeError("the connection is not open yet")
        return self._identity

    @property
    def tools(self) -> tuple[Tool[Any, Any], ...]:
        """The tools of the latest adopted listing, in the server's order."""
        return self._listing.tools

    @property
    def skipped(self) -> tuple[SkippedTool, ...]:
        """The listed tools that could not be offered, with the reason."""
        return self._listing.skipped

    @property
    def remote_names(self) -> Mapping[str, str]:
        """Our tool name -> the server's, for the latest listing."""
        return self._listing.remote_names

    @property
    def version(self) -> int:
        """How many tool listings were adopted (1 after connecting)."""
        return self._version

    @property
    def lost(self) -> str | None:
        """Why the connection is lost (or closed); None while it is usable."""
        return self._lost

    def toolkit(self) -> Toolkit:
        """The current tools as a Toolkit (for an agent whose tools are fixed when it is made)."""
        return Toolkit(*self._listing.tools)

    def handlers(self) -> Layer:
        """A Layer binding the current tools' handlers (by each tool's handler key)."""
        return self.toolkit().handlers()

    def snapshot(self) -> ToolSnapshot:
        """The latest listing as the engine's ``ToolSnapshot`` (tools and handlers by name): what
        makes the connection a ``ToolSource``.

        Never waits: the snapshot is built once per adopted listing and returned as the same
        object until the server's list changes.
        """
        return self._listing.snapshot

    def layer(self) -> Layer:
        """A Layer providing this connection under its server's ``key``: the ``ToolSource`` an
        agent names in ``Agent(tool_sources=(server.key,))``. (For an agent whose toolkit is
        fixed instead, use :meth:`toolkit` and :meth:`handlers`.)

        The connection itself is not opened or closed by the Layer: open it with
        ``async with connect(server)`` around ``open_runtime``, so the SDK's tasks live in a
        nursery that outlasts the runtime.
        """
        return Layer.succeed(self.server.key, self, name=self.server.key.name)

    def reserve(self, *owners: Agent | Toolkit | str) -> None:
        """Keep the names of ``owners``' tools for them: a tool of the server named so (the name
        the model sees, prefix and all) is not offered, now or in a later listing, and is in
        :attr:`skipped` with the reason.

        ``owners`` are agents (the tools of their own toolkit), toolkits, or names. An agent's own
        tools come before its tool sources (``Agent.tool_sources``): the engine leaves a source's
        tool of a name the agent has out of every turn anyway, with only a warning in its logs.
        Reserving the agent's names makes that visible here. Never waits.
        """
        for owner in owners:  # all checked first: a refusal reserves none of them
            if not isinstance(owner, Agent | Toolkit | str):
                raise TypeError(
                    "reserve: each owner must be an Agent, a Toolkit or a tool name, got "
                    f"{type(owner).__name__}"
                )
        for owner in owners:
            if isinstance(owner, str):
                self._reserved[owner] = "the name is reserved (McpConnection.reserve)"
            elif isinstance(owner, Agent):
                why = (
                    f"a tool of the agent {owner.name!r} has this name, and an agent's own tools "
                    "come first"
                )
                self._reserved.update(dict.fromkeys(owner.toolkit.names, why))
            else:
                why = "a tool of a toolkit given to McpConnection.reserve has this name"
                self._reserved.update(dict.fromkeys(owner.names, why))
        self._listing = without_reserved(self._listing, self._reserved)

    async def wait_version(self, version: int) -> None:
        """Return once ``version`` listings have been adopted (at once if they have).

        Raises :class:`McpRequestError` if the connection is lost first.
        Cancellation: a plain wait; cancelling it changes nothing.
        """
        while self._version < version:
            if self._lost is not None:
                raise McpRequestError(self.server.name, "tools/list", self._lost)
            await self._changed.wait()

    async def refresh(self) -> None:
        """List the server's tools again now and adopt the result.

        Raises :class:`McpRequestError` (a protocol error, no answer within the call timeout, a
        lost connection). Cancellation: the listing in flight is abandoned and nothing is adopted.
        """
        await self._adopt_listing()

    # ---- internals: requests -------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        send: Callable[[ClientSession], Awaitable[T]],
        *,
        uri: str | None = None,
        prompt: str | None = None,
        arguments: Mapping[str, str] | None = None,
    ) -> T:
        """:meth:`_send_request` in a span of the effect core's tracing hook (see ``_tracing``);
        the URI and the prompt's arguments are content."""
        with trace_span(span_name(method, prompt), kind="client") as span:
            request_started(span, self.server, self._identity, method, prompt=prompt)
            if uri is not None:
                span.set_content("mcp.resource.uri", uri)
            if arguments:
                span.set_content("effectagent.mcp.prompt.arguments", dict(arguments))
            return await self._send_request(method, send)

    async def _send_request(self, method: str, send: Callable[[ClientSession], Awaitable[T]]) -> T:
        """Send one request of the connection's own API, bounded by the call timeout."""
        from mcp import MCPError

        session = self._session
        if session is None:
            raise McpRequestError(self.server.name, method, self._lost or "not connected")
        if self._lost is not None:
            raise McpRequestError(self.server.name, method, self._lost)
        timeout = self.server.limits.call_timeout
        tag = _Tag()
        with trio.move_on_after(timeout):
            try:
                with tag.scope, _tagged(tag):
                    return await send(session)
                why = self._unreadable.pop(str(tag.request_id), "it was dropped")
                raise McpRequestError(
                    self.server.name, method, f"the answer to {method} could not be read: {why}"
                )
            except MCPError as exc:
                if _closed_by_sdk(exc):
                    self._mark_lost("the connection closed")
                    raise McpRequestError(self.server.name, method, self._why_lost()) from None
                reason = self._redact(exc.message)
                raise McpRequestError(self.server.name, method, reason, exc.code) from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
                self._mark_lost("the connection closed")
                raise McpRequestError(self.server.name, method, self._why_lost()) from None
            finally:
                if tag.request_id is not None:
                    self._waiting.pop(tag.request_id, None)
                    self._unreadable.pop(tag.request_id, None)
                    self._unsent.pop(tag.request_id, None)
        raise McpRequestError(self.server.name, method, f"no answer within {timeout} s")

    def _why_lost(self) -> str:
        """Why the connection is lost, for a message: "the connection closed" unless the
        transport dropped it for a reason of its own."""
        return self._dropped or "the connection closed"

    def _request_unsent(self, request_id: str | None, why: str, sent: bool) -> None:
        """The server is gone for this connection, and the request ``request_id`` (if one of
        ours) did not run: it was not ``sent`` at all, or the server refused it unrun
        (``open_transport``'s ``unsent``, over streamable HTTP). The connection is lost."""
        if request_id is not None:
            self._unsent[request_id] = sent
        self._transport_dropped(self._redact(why))

    def _transport_dropped(self, reason: str) -> None:
        """The transport dropped the connection (``open_transport``'s ``dropped``)."""
        if self._dropped is None:
            self._dropped = reason
        self._mark_lost(reason)

    def _mark_lost(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
            self._changed.set()
            self._relistings.wake()

    # ---- internals: tools ----------------------------------------------------------------------

    async def _list_tools(self) -> tuple[list[dict[str, Any]], list[SkippedTool]]:
        """Every page of the server's tools: the valid ones, and the ones skipped (see
        ``_listing``: the answer is read raw and each tool checked on its own).

        Cancellation: the request in flight is abandoned.
        """
        found: list[dict[str, Any]] = []
        skipped: list[SkippedTool] = []
        cursor: str | None = None
        max_tools = self.server.limits.max_tools
        listed = 0
        for _ in range(MAX_PAGES):
            raw = await self._request("tools/list", partial(self._raw_tools_page, cursor))
            try:
                tools, cursor = tool_page(raw)
            except NotAListing as exc:
                raise McpRequestError(self.server.name, "tools/list", str(exc)) from None
            tools, over = past_max_tools(tools, listed, max_tools)
            listed += len(tools)
            valid, invalid = await checked_tools(tools)
            found.extend(valid)
            skipped.extend(invalid + over)
            if not cursor:
                return found, skipped
            if listed >= max_tools:
                why = (
                    f"the listing reached max_tools ({max_tools}): its further pages were not read"
                )
                skipped.append(SkippedTool("(more pages)", why))
                return found, skipped
        why = f"the server lists more than {MAX_PAGES} pages of tools: the rest was not read"
        skipped.append(SkippedTool("(more pages)", why))
        return found, skipped

    async def _raw_tools_page(self, cursor: str | None, _: ClientSession) -> dict[str, Any]:
        """One ``tools/list`` answer as the server sent it, past the SDK's check of the answer
        as a whole (which would refuse every tool for one it rejects).

        Cancellation: the request is abandoned (the server is told).
        """
        from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

        dispatcher = self._dispatcher
        assert dispatcher is not None  # set with the session
        params = {"cursor": cursor} if cursor else None
        version = self.identity.protocol_version
        # An id of our own, so that an answer the transport could not read (the SDK then drops
        # it and hands ``_handle_message`` the parser's error) fails this request at once.
        request_id = f"effectagent-tools-list-{next(self._ids)}"
        with trio.CancelScope() as scope:
            self._waiting[request_id] = scope
            try:
                return await dispatcher.send_raw_request(
                    "tools/list",
                    params,
                    {"headers": {MCP_PROTOCOL_VERSION_HEADER: version}, "request_id": request_id},
                )
            finally:
                del self._waiting[request_id]
        why = self._unreadable.pop(request_id, "it was dropped")
        raise McpRequestError(
            self.server.name, "tools/list", f"the answer to tools/list could not be read: {why}"
        )

    async def _adopt_listing(self) -> None:
        listed, skipped = await self._list_tools()
        server = self.server
        listing, self._shapes = await build_listing(
            server.name,
            server.prefix,
            listed,
            skipped,
            self._shapes,
            self._make_tool,
            limits=server.limits,
            reserved=self._reserved,
        )
        # A name reserved while the listing was being built is left out too.
        self._listing = without_reserved(listing, self._reserved)
        self._version += 1
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    def _make_tool(self, remote: str, local: str, shape: ToolShape) -> Tool[Any, Any]:
        approval = self.server.needs_approval
        if not isinstance(approval, bool):
            options = shape.annotations
            destructive = options["destructive"]
            approval = bool(
                approval(
                    ToolAnnotations(
                        readonly=options["readonly"],
                        destructive=not options["readonly"] if destructive is None else destructive,
                        idempotent=options["idempotent"],
                        open_world=options["open_world"],
                        title=options["title"],
                    )
                )
            )
        return Tool.dynamic(
            local,
            shape.description,
            shape.parameters_schema,
            success_schema=shape.success_schema,
            failure=_FAILURES,
            handler=self._handler(remote, local, shape),
            needs_approval=approval,
            **shape.annotations,
        )

    def _handler(self, remote: str, local: str, shape: ToolShape) -> Handler:
        check = structured_check(shape)

        async def call_remote(params: dict[str, Any], call: ToolCallContext) -> dict[str, Any]:
            """Call the remote tool with the arguments the engine decoded and checked.

            Cancellation: the request is abandoned (the SDK tells the server it was cancelled);
            whether the tool ran is then unknown to us, as for a timeout.
            """
            with trace_span(span_name("tools/call", remote), kind="client") as span:
                request_started(
                    span, self.server, self._identity, "tools/call", tool=(remote, local)
                )
                span.set_content("gen_ai.tool.call.arguments", params)
                return await self._call(remote, local, params, check)

        return call_remote

    async def _call(
        self, remote: str, local: str, arguments: dict[str, Any], check: _Check | None
    ) -> dict[str, Any]:
        """Call the remote tool; before the result (or the failure) is handed back, settle the
        re-listing a list-changed notification that came during the call started (module
        notes), so the engine's next turn sees the changed list.

        Cancellation: the request is abandoned, and a cancelled call waits for nothing.
        """
        relistings = self._relistings
        announced = relistings.announced
        try:
            body = await self._exchange(remote, local, arguments, check)
        except Exception:
            await self._settle_relisting(announced)
            raise
        await self._settle_relisting(announced)
        return body

    async def _settle_relisting(self, announced: int) -> None:
        """Wait, at most ``call_timeout``, until the tools are listed again if a list-changed
        notification arrived since ``announced`` were counted (at once if none did).

        One scheduling pass first: the SDK hands a notification to ``_handle_message`` in a
        task it starts *before* it hands over the answer that followed it on the wire, and
        that task reaches the handler without waiting, so after one pass of the scheduler
        every notification sent before the answer has been counted.

        Cancellation: a plain wait; cancelling it changes nothing.
        """
        await trio.lowlevel.checkpoint()
        relistings = self._relistings
        target = relistings.announced
        if target == announced:
            return
        with trio.move_on_after(self.server.limits.call_timeout):
            await relistings.wait(target, lambda: self._lost is not None)

    async def _exchange(
        self, remote: str, local: str, arguments: dict[str, Any], check: _Check | None
    ) -> dict[str, Any]:
        import mcp_types as types
        from mcp import MCPError
        from pydantic import ValidationError

        server = self.server
        session = self._session
        if session is None or self._lost is not None:
            raise McpUnavailable(
                local,
                f"the MCP server {server.name!r} is not connected "
                f"({self._lost if self._lost is not None else 'not open'}); the call was not sent",
                self._identity,
            )
        limits = server.limits
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=remote, arguments=arguments)
        )
        tag = _Tag()
        with trio.move_on_after(limits.call_timeout):
            try:
                with tag.scope, _tagged(tag):
                    result = await session.send_request(request, types.CallToolResult)
                if tag.scope.cancelled_caught:  # an answer came that could not be read
                    why = self._unreadable.pop(str(tag.request_id), "it was dropped")
                    raise McpMalformedResult(
                        f"the MCP server {server.name!r} answered {local!r} with something "
                        f"that could not be read: {why}"
                    )
            except MCPError as exc:
                if _closed_by_sdk(exc):
                    self._mark_lost("the connection closed during a call")
                    raise self._closed_during(local, tag) from None
                unrun = self._unrun(local, tag)  # the server no longer knows the session
                if unrun is not None:
                    raise unrun from None
                # The server refused the call with a protocol error: answered, so not unknown.
                message = bounded_text(self._redact(exc.message), limits.max_result_bytes)
                raise McpToolError(local, message, exc.code, self._identity) from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
                self._mark_lost("the connection closed during a call")
                raise self._closed_during(local, tag) from None
            except ValidationError as exc:
                raise McpMalformedResult(
                    f"the MCP server {server.name!r} answered {local!r} with something that is "
                    f"not a tool result: {exc.error_count()} problem(s)"
                ) from None
            finally:
                if tag.request_id is not None:
                    self._waiting.pop(tag.request_id, None)
                    self._unreadable.pop(tag.request_id, None)
                    self._unsent.pop(tag.request_id, None)
            raw = dump_model(result)
            if raw.get("isError") is True:
                raise error_message(
                    local, raw, limits.max_result_bytes, self._redact, self._identity
                )
            body = envelope(self.identity, remote, local, raw, limits.max_result_bytes)
            if check is not None:
                check(body)
            return body
        raise OutcomeUnknown(
            f"the MCP server {server.name!r} did not answer {local!r} within "
            f"{limits.call_timeout} s (call_timeout); it may or may not have run"
        )

    def _closed_during(self, local: str, tag: _Tag) -> McpUnavailable | OutcomeUnknown:
        """What a call whose connection closed before its answer ends with: ``McpUnavailable``
        when its request never ran (see :meth:`_unrun`), else ``OutcomeUnknown`` — it may have
        reached the server."""
        unrun = self._unrun(local, tag)
        return unrun if unrun is not None else OutcomeUnknown(self._closed_in_flight(local))

    def _unrun(self, local: str, tag: _Tag) -> McpUnavailable | None:
        """``McpUnavailable`` for a call whose request the transport found never ran — it
        could not reach the server, or the server no longer knew the session
        (``_request_unsent``) — else None."""
        sent = self._unsent.get(tag.request_id) if tag.request_id is not None else None
        if sent is None:
            return None
        what = "the server refused the call unrun" if sent else "the call was not sent"
        return McpUnavailable(
            local,
            f"the MCP server {self.server.name!r} is not connected ({self._why_lost()}); {what}",
            self._identity,
        )

    def _closed_in_flight(self, local: str) -> str:
        why = f" ({self._dropped})" if self._dropped is not None else ""
        return (
            f"the connection to the MCP server {self.server.name!r} closed while {local!r} was "
            f"in flight{why}; it may or may not have run"
        )

    # ---- internals: the host task --------------------------------------------------------------

    async def _handle_message(self, message: Any) -> None:
        import mcp_types as types

        # A transport error delivered here (e.g. a line on a stdio server's stdout that is not
        # JSON-RPC) does not lose the connection by itself: a broken transport closes it, and
        # the calls in flight then fail on their own. But the answer to a raw request of ours
        # that could not be read fails that request now, with the parser's reason, rather than
        # leave it to wait out its timeout.
        if isinstance(message, Exception):
            if self._waiting:
                found = unreadable_answer(message)
                if found is not None and isinstance(found[0], str) and found[0] in self._waiting:
                    self._unreadable[found[0]] = self._redact(found[1])
                    self._waiting[found[0]].cancel()
            return
        if isinstance(message, types.ToolListChangedNotification) and self._relist is not None:
            self._relistings.announce()
            # When a re-listing is already due, it has not started: it will see this change too.
            with suppress(trio.WouldBlock):
                self._relist.send_nowait(None)

    async def _host(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from mcp import ClientSession
        from mcp_types import Implementation

        started = False
        send, receive = trio.open_memory_channel[None](1)
        try:
            async with AsyncExitStack() as stack:
                stderr = self._stderr if self._stderr is not None else StderrTail()
                read, write = await open_transport(
                    self.server, stack, stderr, self._transport_dropped, self._request_unsent
                )
                # Our own dispatcher, for the raw tools/list answers (``_raw_tools_page``).
                dispatcher = _dispatcher(read, write, self._ids, self._waiting, self._redact)
                session = await stack.enter_async_context(
                    ClientSession(
                        message_handler=self._handle_message,
                        client_info=Implementation(name="effectagent", version="0.1.0"),
                        dispatcher=dispatcher,
                    )
                )
                init = await session.initialize()
                info = init.server_info
                self._identity = ServerIdentity(info.name, info.version, init.protocol_version)
                self.capabilities = dump_model(init.capabilities)
                self.instructions = init.instructions
                self._session = session
                self._dispatcher = dispatcher
                self._relist = send
                await self._adopt_listing()
                started = True
                task_status.started()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._relist_on_change, receive)
                    await self._stop.wait()
                    nursery.cancel_scope.cancel()
        except Exception as exc:
            if not started:
                raise
            # After the start, a failing transport is a lost connection, not the caller's error.
            self._mark_lost(self._redact(f"the connection failed: {type(exc).__name__}: {exc}"))
        finally:
            self._session = None
            self._dispatcher = None
            self._mark_lost("the connection is closed")
            send.close()
            receive.close()

    def _stderr_clause(self) -> str:
        return self._redact(self._stderr.clause()) if self._stderr is not None else ""

    async def _relist_on_change(self, receive: trio.MemoryReceiveChannel[None]) -> None:
        """List the tools again each time the server announced a change since the last
        listing started, the starts at least ``relist_interval`` apart: the announcements that
        come meanwhile wait in the channel as one (see ``_handle_message``)."""
        relistings = self._relistings
        interval = self.server.limits.relist_interval
        async for _ in receive:
            started = trio.current_time()
            covers = relistings.announced
            # On failure the previous listing stays; `lost` says why if the connection is gone.
            with suppress(McpRequestError):
                await self._adopt_listing()
            relistings.finished(covers)
            await trio.sleep_until(started + interval)


@asynccontextmanager
async def connect(server: McpServer) -> AsyncIterator[McpConnection]:
    """Open a connection to ``server`` for the duration of the block.

    Starts the server's process (stdio) or reaches its URL (streamable HTTP), performs the
    handshake and lists the tools, all within ``server.limits.connect_timeout``; raises
    :class:`McpConnectError` (with the end of the process's stderr, for stdio) when any of that
    fails or takes longer.

    Leaving the block closes the session and the transport before returning: a stdio server gets
    its stdin closed, then SIGTERM, then SIGKILL, sent to its whole process group (each after a
    bounded wait), so no process outlives the block. A connection that fails while the block runs does not interrupt it:
    calls then fail as described on :class:`McpConnection`.

    Cancellation: cancelling the connect (or the block) closes everything opened so far, shielded
    and bounded, before the cancellation goes on.
    """
    if not isinstance(server, StdioServer | HttpServer):
        raise TypeError(  # not its repr: a configuration passed here may hold tokens
            f"connect: server must be a StdioServer or HttpServer, got {type(server).__name__}"
        )
    connection = McpConnection(server)
    timeout = server.limits.connect_timeout
    if isinstance(server, StdioServer):
        # The end of the process's stderr is kept, so a failure can quote it.
        connection._stderr = StderrTail()
    try:
        with redacting_logs(connection._secrets):
            async with trio.open_nursery() as nursery:
                try:
                    with trio.fail_after(timeout):
                        await nursery.start(connection._host)
                except trio.TooSlowError:
                    raise McpConnectError(
                        server.name,
                        f"no handshake and tool listing within {timeout} s (connect_timeout)"
                        + connection._stderr_clause(),
                    ) from None
                except McpConnectError:
                    raise
                except Exception as exc:
                    why = connection._dropped or connection._redact(_reason(exc))
                    reason = why + connection._stderr_clause()
                    if connection._secrets:  # the cause's message may quote a secret
                        raise McpConnectError(server.name, reason) from None
                    raise McpConnectError(server.name, reason) from exc
                try:
                    yield connection
                finally:
                    connection._stop.set()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            alone = group.exceptions[0]
            # Out of its group with the cause it was given (none when a secret may show in it):
            # ``from None`` would have dropped it, and with it what went wrong underneath.
            raise alone from alone.__cause__
        raise


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _reason(exc.exceptions[0])
    if isinstance(exc, McpRequestError):
        return exc.reason
    if _closed_by_sdk(exc):
        return "the connection closed during the handshake (did the server exit?)"
    if isinstance(exc, FileNotFoundError | PermissionError) and exc.filename is not None:
        # The server could not be started: say so in words (not Python's repr), naming the
        # path (its command, or its working directory)
        problem = "was not found" if isinstance(exc, FileNotFoundError) else "may not be used"
        return f"it could not be started: {exc.filename!r} {problem}"
    return f"{type(exc).__name__}: {exc}"

"""The resources and prompts of an MCP server: not tools, but a small API of their own on the
connection (:class:`ResourcesAndPrompts`, which ``McpConnection`` is), each answer bounded by
``max_result_bytes`` and returned as our own typed values.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import McpRequestError
from ._mapping import encoded_size
from ._results import McpPrompt, McpPromptResult, McpResource, McpResourceContents
from ._servers import McpServer

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["MAX_PAGES", "ResourcesAndPrompts", "dump_model"]

T = TypeVar("T")

#: The most pages of one listing read.
MAX_PAGES = 100


def dump_model(model: Any) -> dict[str, Any]:
    """An SDK model in the protocol's JSON form: its field names, nothing empty."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)  # type: ignore[no-any-return]


class ResourcesAndPrompts:
    """Listing and reading resources, listing and rendering prompts: the part of a connection's
    API that is not about tools. The connection provides ``server`` and :meth:`_request`."""

    __slots__ = ()

    server: McpServer

    async def _request(
        self,
        method: str,
        send: Callable[[ClientSession], Awaitable[T]],
        *,
        uri: str | None = None,
        prompt: str | None = None,
        arguments: Mapping[str, str] | None = None,
    ) -> T:
        """Send one request on the connection's session (the connection's own)."""
        raise NotImplementedError

    async def list_resources(self) -> tuple[McpResource, ...]:
        """Every resource the server lists (all pages).

        Raises :class:`McpRequestError`, also when the listing goes on past ``max_list_items``
        resources or ``MAX_PAGES`` pages. Cancellation: the request is abandoned; nothing changes.
        """
        pages = await self._pages("resources/list", _list_resources, "resources")
        return tuple(McpResource.from_json(item) for item in pages)

    async def read_resource(self, uri: str) -> tuple[McpResourceContents, ...]:
        """The contents of the resource at ``uri``: text, or base64 blobs as the server sent them.

        Raises :class:`McpRequestError`, also when the contents are over ``max_result_bytes``.
        Cancellation: the request is abandoned; nothing changes.
        """
        if not _text(uri):
            raise ValueError(f"read_resource: uri must be a non-empty str, got {uri!r}")
        result = await self._request("resources/read", lambda s: s.read_resource(uri), uri=uri)
        raw = dump_model(result)
        self._check_size("resources/read", raw)
        return tuple(McpResourceContents.from_json(c) for c in raw.get("contents") or ())

    async def list_prompts(self) -> tuple[McpPrompt, ...]:
        """Every prompt the server lists (all pages).

        Raises :class:`McpRequestError`, also when the listing goes on past ``max_list_items``
        prompts or ``MAX_PAGES`` pages. Cancellation: the request is abandoned; nothing changes.
        """
        pages = await self._pages("prompts/list", _list_prompts, "prompts")
        return tuple(McpPrompt.from_json(item) for item in pages)

    async def _pages(self, method: str, fetch: Any, field: str) -> list[dict[str, Any]]:
        """Every item of a paginated listing, as plain JSON; :class:`McpRequestError` when it
        goes on past ``max_list_items`` items or ``MAX_PAGES`` pages.

        Cancellation: the request in flight is abandoned.
        """
        import mcp_types as types

        limit = self.server.limits.max_list_items
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._request(method, partial(fetch, params=params))
            items = getattr(page, field)
            if len(found) + len(items) > limit:
                raise McpRequestError(
                    self.server.name,
                    method,
                    f"the server lists more than {limit} items (max_list_items)",
                )
            found.extend(dump_model(item) for item in items)
            cursor = page.next_cursor
            if not cursor:
                return found
        raise McpRequestError(
            self.server.name,
            method,
            f"the server lists more than {MAX_PAGES} pages: the listing was not read to its end",
        )

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None
    ) -> McpPromptResult:
        """The prompt ``name`` rendered by the server with ``arguments`` (strings).

        Raises :class:`McpRequestError`, also when the result is over ``max_result_bytes``.
        Cancellation: the request is abandoned; nothing changes.
        """
        if not _text(name):
            raise ValueError(f"get_prompt: name must be a non-empty str, got {name!r}")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise TypeError(
                "get_prompt: arguments must be None or a mapping of str to str, got "
                f"{type(arguments).__name__}"
            )
        args = dict(arguments or {})
        if not all(_text(k, empty=True) and _text(v, empty=True) for k, v in args.items()):
            raise TypeError("get_prompt: arguments must map str to str")
        result = await self._request(
            "prompts/get", lambda s: s.get_prompt(name, args), prompt=name, arguments=args
        )
        raw = dump_model(result)
        self._check_size("prompts/get", raw)
        return McpPromptResult.from_json(raw)

    def _check_size(self, method: str, raw: Any) -> None:
        limit = self.server.limits.max_result_bytes
        size = encoded_size(raw)
        if size > limit:
            raise McpRequestError(
                self.server.name,
                method,
                f"the answer is {size} bytes, over the limit of {limit} bytes (max_result_bytes)",
            )


def _text(value: object, *, empty: bool = False) -> bool:
    return isinstance(value, str) and (empty or bool(value))


async def _list_resources(session: ClientSession, *, params: Any) -> Any:
    return await session.list_resources(params=params)


async def _list_prompts(session: ClientSession, *, params: Any) -> Any:
    return await session.list_prompts(params=params)

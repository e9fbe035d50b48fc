"""An MCP client (CAP-009) on the official ``mcp`` SDK: connect to a server over stdio or
streamable HTTP within a Trio scope, offer its tools to agents as ordinary dynamic ``Tool``s (a
``ToolSource`` that follows the server's ``list_changed`` between turns), and read its resources
and prompts through a small API of their own.

``import capabilities.mcp`` does not import the SDK; :func:`connect` does, on first use.

A server that cannot be reached is :class:`McpConnectError`; a resource or prompt request that
fails is :class:`McpRequestError`. What a tool call of the server's ends with is a tool outcome
the model reads: :class:`McpToolError` when the server reports an error, :class:`McpResultTooLarge`
for an oversized result and :class:`McpUnavailable` for a call to a server the connection lost.
"""

from ._connection import McpConnection as McpConnection
from ._connection import connect as connect
from ._errors import McpConnectError as McpConnectError
from ._errors import McpRequestError as McpRequestError
from ._errors import McpResultTooLarge as McpResultTooLarge
from ._errors import McpToolError as McpToolError
from ._errors import McpUnavailable as McpUnavailable
from ._mapping import ServerIdentity as ServerIdentity
from ._results import McpPrompt as McpPrompt
from ._results import McpPromptResult as McpPromptResult
from ._results import McpResource as McpResource
from ._results import McpResourceContents as McpResourceContents
from ._results import SkippedTool as SkippedTool
from ._servers import HttpServer as HttpServer
from ._servers import McpLimits as McpLimits
from ._servers import McpServer as McpServer
from ._servers import StdioServer as StdioServer

__all__ = [
    "connect",
    "McpConnection",
    "StdioServer",
    "HttpServer",
    "McpServer",
    "McpLimits",
    "ServerIdentity",
    "SkippedTool",
    "McpResource",
    "McpResourceContents",
    "McpPrompt",
    "McpPromptResult",
    "McpConnectError",
    "McpRequestError",
    "McpToolError",
    "McpResultTooLarge",
    "McpUnavailable",
]

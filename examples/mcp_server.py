"""A small MCP server written with the official SDK, for the MCP guide's example (docs/guides/mcp.md): a note store
with a readonly lookup, an addition with a structured result, and a resource. Run it as
``python -m examples.mcp_server`` (it speaks MCP over its stdin and stdout).

The SDK is imported in :func:`main` only, so importing this module stays cheap.
"""

from __future__ import annotations

NOTES = {"oslo": "Pack a coat: 4 °C.", "rome": "Sunglasses: 17.5 °C."}


def main() -> None:
    """Serve over stdio until the client closes the connection."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("notes", version="1.0.0")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    def lookup(city: str) -> str:
        """The travel note kept for a city."""
        return NOTES.get(city.lower(), f"No note for {city}.")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.resource("notes://cities", mime_type="text/plain")
    def cities() -> str:
        """The cities with a note."""
        return ", ".join(sorted(NOTES))

    server.run()


if __name__ == "__main__":
    main()

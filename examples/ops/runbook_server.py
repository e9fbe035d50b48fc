"""The operations team's runbook service: an MCP server written with the official SDK, spoken to
over stdio (``python -m examples.ops.runbook_server``). Two read-only tools: a service's runbook
and its recent changes.

The SDK is imported in :func:`main` only, so importing this module stays cheap.
"""

from __future__ import annotations

from typing import Final

RUNBOOKS: Final = {
    "checkout-api": (
        "checkout-api runbook. Symptom: 503s with 'QueuePool limit ... reached'. Cause seen "
        "before: connections held by a job. Mitigation: a rolling restart of checkout-api is "
        "safe at any time (stateless; drains each replica). Do NOT terminate orders-db sessions "
        "yourself: the DBA on call (#dba-oncall) decides. Then disable the offending job with "
        "its feature flag and open a postmortem."
    ),
}
CHANGES: Final = {
    "checkout-api": [
        "09:12 UTC deploy 2.14.0 (build 8c1f2e4): new refund-export job, every 60 s (PR #4821)",
        "yesterday 16:40 UTC deploy 2.13.2: dependency updates",
    ],
}


def main() -> None:
    """Serve over stdio until the client closes the connection."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("runbooks", version="3.1.0")
    readonly = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    @server.tool(annotations=readonly)
    def lookup(service: str) -> str:
        """The runbook of a service: known failure modes and what is safe to do."""
        return RUNBOOKS.get(service, f"No runbook for {service}.")

    @server.tool(annotations=readonly)
    def changes(service: str) -> list[str]:
        """The service's recent changes (deploys, configuration), newest first."""
        return CHANGES.get(service, [])

    server.run()


if __name__ == "__main__":
    main()

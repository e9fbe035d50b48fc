"""MCP servers the MCP client's tests start as subprocesses."""

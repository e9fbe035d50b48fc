"""Sandbox and CodeExecutor ports, with isolating implementations."""

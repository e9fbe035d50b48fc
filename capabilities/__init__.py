"""Capabilities around the agent engine: sessions, steering, approval, compaction, MCP, Code Mode, …"""

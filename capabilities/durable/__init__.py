"""Durable runs on SQLite (deployment class DN) — work in progress; see the modules."""

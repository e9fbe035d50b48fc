"""Identifiers the capabilities make up: a readable prefix and 128 random bits."""

from __future__ import annotations

import secrets

__all__ = ["new_id"]


def new_id(prefix: str) -> str:
    """A fresh identifier such as ``input_3f9c…`` (unguessable, unique in practice)."""
    return f"{prefix}_{secrets.token_hex(16)}"

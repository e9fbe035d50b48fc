"""Identifiers for runs, conversations and inputs: unique, opaque, cheap.

Identifiers are unique, not secret (nothing is authorized by knowing one): 64 random bits from a
generator seeded by the OS, reseeded in a forked child so parent and child never share a stream.
(``secrets.token_hex`` would cost a system call per identifier, three per run.) The hex digits are
made 256 identifiers at a time, from one draw of random bits.
"""

from __future__ import annotations

import os
import random

__all__ = ["new_id"]

_ids = random.Random(os.urandom(32))
_suffixes: list[str] = []
_BATCH = 256


def _reseed_after_fork() -> None:
    _ids.seed(os.urandom(32))
    _suffixes.clear()


os.register_at_fork(after_in_child=_reseed_after_fork)


def new_id(prefix: str) -> str:
    """A fresh opaque identifier (``prefix_`` + 16 hex digits)."""
    try:
        return f"{prefix}_{_suffixes.pop()}"
    except IndexError:  # used up (another thread may have taken the last one meanwhile): refill
        digits = f"{_ids.getrandbits(64 * _BATCH):0{16 * _BATCH}x}"
        _suffixes.extend(digits[i : i + 16] for i in range(0, 16 * _BATCH, 16))
        return new_id(prefix)

"""Digests of a tool call's decoded arguments, for binding approval decisions to their call.

An approval request carries a digest of exactly the arguments the tool will run with; a decision
bound to it cannot be replayed for other arguments. The digest is keyed (HMAC-SHA256 under a key
of the runtime's own, random per runtime): it identifies arguments without revealing them — a
plain hash of a low-entropy secret in the arguments could be guessed offline — and is comparable
within that runtime only. The arguments are hashed as canonical JSON (sorted keys, no spaces) of
their encoded form, so equal arguments give equal digests however the model spelled them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any, final

from effectagent.ai import Tool
from effectagent.effect import encode

__all__ = ["ArgumentDigest"]


@final
class ArgumentDigest:
    """Keyed digests of decoded tool arguments (see the module notes)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else os.urandom(32)

    def __call__(self, tool: Tool[Any, Any], params: Any) -> str:
        """The digest of ``params``, the decoded arguments of a call of ``tool``."""
        value = params if tool.is_dynamic else encode(params)
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        message = text.encode("utf-8", "surrogatepass")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

"""Input with media as a row keeps it (a steering input waiting in the journal, a durable
submission), and built again from one — pure, but for :func:`read_media`, which reads the bytes.

A row holds the input's text parts in its ``text`` column, joined by blank lines (as a run's
input joins them), so clearing that column — as delivery and expiry do — clears all the input's
text. Its ``parts`` column (JSON) holds the input's order: ``["text", n]`` for a text part of
``n`` characters, ``["media", reference]`` for a media part (``MediaPart.reference()``: kind,
media type, name, size and SHA-256 digest, or a URL — never the bytes, which go to the ``media``
table by digest). A reference's name and URL are redacted as text before they are stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from effectagent.ai import MediaPart, MediaRef, TextContent
from effectagent.engine import SteeringInput

from ..storage._port import Connection

__all__ = ["Stored", "content_of", "digests_of", "input_content", "read_media", "stored"]

#: What a row keeps of input with media: its text column, its parts (JSON) and the bytes of its
#: media parts by digest.
Stored = tuple[str, str, dict[str, bytes]]

_SEPARATOR = "\n\n"


def stored(content: tuple[TextContent | MediaPart, ...], redact: Callable[[str], str]) -> Stored:
    """What a row keeps of ``content`` (its text parts already redacted)."""
    texts: list[str] = []
    entries: list[list[Any]] = []
    blobs: dict[str, bytes] = {}
    for part in content:
        if isinstance(part, TextContent):
            texts.append(part.text)
            entries.append(["text", len(part.text)])
            continue
        ref = part.reference()
        for key in ("name", "url"):
            if key in ref:
                ref[key] = redact(ref[key])
        entries.append(["media", ref])
        if not part.url:
            blobs[part.digest] = part.data
    return _SEPARATOR.join(texts), json.dumps(entries, separators=(",", ":")), blobs


def digests_of(parts: str) -> list[str]:
    """The digests of the media parts a row's ``parts`` refers to."""
    return [
        value["digest"]
        for kind, value in json.loads(parts)
        if kind == "media" and isinstance(value, dict) and isinstance(value.get("digest"), str)
    ]


def content_of(
    text: str, parts: str, media: Mapping[str, bytes]
) -> tuple[TextContent | MediaPart, ...]:
    """The input a row holds, its media parts' bytes from ``media`` (by digest). Raises
    ``MediaError`` (a ``ValueError``) for a digest ``media`` lacks, ``ValueError`` for ``parts``
    that do not fit ``text``."""
    content: list[TextContent | MediaPart] = []
    at = 0
    for kind, value in json.loads(parts):
        if kind == "text":
            end = at + int(value)
            if end > len(text):
                raise ValueError("the stored parts do not fit the stored text")
            content.append(TextContent(text[at:end]))
            at = end + len(_SEPARATOR)
            continue
        ref = MediaRef.of(value)
        if isinstance(ref, MediaPart):  # a URL: no bytes
            content.append(ref)
            continue
        data = media.get(ref.digest)
        if data is None:
            raise ref.missing()
        content.append(ref.with_data(data))
    return tuple(content)


def input_content(value: object) -> tuple[str, tuple[TextContent | MediaPart, ...] | None]:
    """(the text, the content when it holds media — None for text alone) of ``value``: a str,
    or a sequence of str and media parts, as a run's input. Raises what a run's input meets at
    the call (``TypeError``, ``ValueError`` for an empty sequence)."""
    item = SteeringInput.of("", "steering", value, "", 0.0)
    return item.text, item.content


def read_media(conn: Connection, digests: Sequence[str]) -> dict[str, bytes]:
    """The bytes the ``media`` table keeps of ``digests`` (one missing is left out)."""
    found: dict[str, bytes] = {}
    for start in range(0, len(digests), 500):
        chunk = digests[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        for digest, data in conn.execute(
            f"SELECT digest, data FROM media WHERE digest IN ({marks})", chunk
        ):
            found[digest] = bytes(data)
    return found

"""Which model takes which media, the check made before a request is sent, and the pieces each
provider's mapping of a media part shares. Pure.

:func:`media_support` is a small table by provider family and model name; a model's settings
may replace it (``OpenAIChat("my-model", media=MediaSupport.of("image"))``). A model that cannot
take a part of a request, or one larger than its bounds, refuses the request with
:class:`~effectagent.ai.MediaNotSupported` before anything is sent (:func:`media_problem`).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterable
from typing import Final, Literal, NoReturn, TypeAlias, get_args

import attrs

from effectagent.ai import (
    MediaKind,
    MediaNotSupported,
    MediaPart,
    Message,
    ResponsePart,
    ToolMessage,
    UserMessage,
    format_bytes,
)

__all__ = [
    "DEFAULT_MAX_REQUEST_MEDIA_BYTES",
    "Family",
    "MediaSupport",
    "data_url",
    "document_text",
    "media_problem",
    "media_support",
    "refused",
]

#: The provider families the table knows.
Family: TypeAlias = Literal[
    "openai-chat", "openai-responses", "openai-compatible", "anthropic", "gemini", "google"
]
#: Every family ``media_support`` knows (``google``, the provider's name in a model string, is
#: ``gemini``).
_FAMILIES: Final = frozenset(get_args(Family))

#: The most media bytes one request carries unless a model's support says otherwise: 32 MiB, the
#: size of Anthropic's largest request.
DEFAULT_MAX_REQUEST_MEDIA_BYTES = 32 * 1024 * 1024

_KINDS: frozenset[str] = frozenset({"image", "document", "audio"})


def _kinds(instance: object, attribute: attrs.Attribute[frozenset[str]], value: object) -> None:
    if not isinstance(value, frozenset) or not value <= _KINDS:
        raise ValueError(
            f"MediaSupport.{attribute.name} must be a frozenset of 'image', 'document' and "
            f"'audio', got {value!r}"
        )


def _positive(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"MediaSupport.{attribute.name} must be a positive int, got {value!r}")


@attrs.frozen
class MediaSupport:
    """What media a model takes: ``kinds`` (of ``"image"``, ``"document"``, ``"audio"``), and
    the bounds of one part and of all the media of a request, in bytes (URL parts count 0)."""

    kinds: frozenset[str] = attrs.field(default=frozenset(), validator=_kinds)
    max_part_bytes: int = attrs.field(default=20 * 1024 * 1024, validator=_positive)
    max_request_bytes: int = attrs.field(
        default=DEFAULT_MAX_REQUEST_MEDIA_BYTES, validator=_positive
    )

    @staticmethod
    def of(*kinds: MediaKind, max_part_bytes: int | None = None) -> MediaSupport:
        """Support for ``kinds`` (none: a text-only model)."""
        if max_part_bytes is None:
            return MediaSupport(frozenset(kinds))
        return MediaSupport(frozenset(kinds), max_part_bytes)


_TEXT_ONLY = MediaSupport()
_MB = 1024 * 1024


def media_support(family: Family, model: str) -> MediaSupport:
    """What ``model`` of ``family`` takes, as far as the table knows (``ValueError`` for a family
    it does not know) — a text-only model when it does not know the model (an
    OpenAI-compatible server's, above all: say what it takes with the ``media=`` setting)."""
    if family not in _FAMILIES:  # a table that guessed would say "text only" for any typo
        known = ", ".join(repr(f) for f in sorted(_FAMILIES))
        raise ValueError(f"media_support: unknown model family {family!r}; one of {known}")
    given: object = model  # checked at run time too: not every caller runs mypy
    if not isinstance(given, str):
        raise TypeError(f"media_support: a model's name is a str, got {type(given).__name__}")
    name = model.lower().rsplit("/", 1)[-1]
    if family in ("gemini", "google"):
        return (
            MediaSupport.of("image", "document", "audio")
            if name.startswith("gemini")
            else _TEXT_ONLY
        )
    if family == "anthropic":
        if name.startswith(("claude-2", "claude-instant")):
            return _TEXT_ONLY
        if name.startswith("claude"):
            return MediaSupport(frozenset({"image", "document"}), 5 * _MB)
        return _TEXT_ONLY
    if family == "openai-compatible":
        return _TEXT_ONLY
    if "audio" in name:  # gpt-4o-audio-preview, gpt-audio: audio in, no images
        return MediaSupport.of("audio") if family == "openai-chat" else _TEXT_ONLY
    if (
        name.startswith(("gpt-3.5", "gpt-4-0", "gpt-4-32k", "davinci", "babbage"))
        or name == "gpt-4"
    ):
        return _TEXT_ONLY
    if name.startswith(("gpt-4", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")):
        if name.startswith(("o1-mini", "o3-mini")):
            return _TEXT_ONLY
        return MediaSupport.of("image", "document")
    return _TEXT_ONLY


def media_problem(
    messages: Iterable[Message], support: MediaSupport, provider: str, model: str
) -> MediaNotSupported | None:
    """The error a request of ``messages`` meets on ``model`` that takes ``support``, or None.
    Only user and tool messages are looked at, one type check each."""
    total = 0
    for message in messages:
        parts: Iterable[object]
        if isinstance(message, UserMessage):
            parts = message.content
        elif isinstance(message, ToolMessage):
            parts = [part for result in message.content for part in result.media]
        else:
            continue
        for part in parts:
            if not isinstance(part, MediaPart):
                continue
            if part.kind not in support.kinds:
                takes = _takes(support)
                return MediaNotSupported(
                    f"{provider} model {model!r} does not take {part.kind} input ({takes}); "
                    f"{part.describe()} was not sent. Choose a model that takes it, or say what "
                    "this one takes with its media= setting"
                )
            if part.size > (most := support.max_part_bytes):
                exact = format_bytes(part.size, apart_from=most)
                size = f" ({exact})" if exact != format_bytes(part.size) else ""
                return MediaNotSupported(
                    f"{part.describe()}{size} is over the {format_bytes(most, apart_from=part.size)} "
                    f"{provider} model {model!r} takes in one part; it was not sent"
                )
            total += part.size
    if total > (limit := support.max_request_bytes):
        return MediaNotSupported(
            f"the request's media come to {format_bytes(total, apart_from=limit)}, over the "
            f"{format_bytes(limit, apart_from=total)} {provider} model {model!r} takes in one "
            "request; nothing was sent"
        )
    return None


def _takes(support: MediaSupport) -> str:
    if not support.kinds:
        return "it takes text only"
    return "it takes " + " and ".join(sorted(support.kinds))


def refused(error: MediaNotSupported) -> AsyncIterator[ResponsePart]:
    """A stream that fails with ``error`` when first read (nothing is sent)."""
    return _Refused(error)


class _Refused:
    """An async iterator that raises its error at the first ``__anext__``."""

    __slots__ = ("error",)

    def __init__(self, error: MediaNotSupported) -> None:
        self.error = error

    def __aiter__(self) -> _Refused:
        return self

    async def __anext__(self) -> ResponsePart:
        raise self.error

    async def aclose(self) -> None:
        """Nothing to close."""


def data_url(part: MediaPart) -> str:
    """``data:<media type>;base64,<data>`` of a part with bytes; a URL part's URL."""
    if part.url:
        return part.url
    return f"data:{part.media_type};base64,{base64.b64encode(part.data).decode('ascii')}"


def b64(part: MediaPart) -> str:
    """The part's bytes, base64."""
    return base64.b64encode(part.data).decode("ascii")


def document_text(part: MediaPart) -> str | None:
    """The text of a text document with bytes (None for a PDF or a URL)."""
    if part.url or not part.media_type.startswith("text/"):
        return None
    return part.data.decode("utf-8", "replace")


def titled_text(part: MediaPart) -> str:
    """A text document as the text a provider without document blocks reads."""
    text = document_text(part) or ""
    return f"[document: {part.name}]\n{text}" if part.name else text


def tool_media_note(call_id: str, name: str) -> str:
    """The text heading the media a tool returned where a provider sends them as user input."""
    return f"[The media returned by the call {call_id} of the tool {name}:]"


def never(value: object) -> NoReturn:  # pragma: no cover - exhaustiveness
    raise AssertionError(f"unexpected {value!r}")

"""Small pieces every provider mapping shares: reading untrusted JSON numbers, writing JSON text,
the bookkeeping of streamed text / reasoning blocks and tool-call arguments, unique tool-call IDs,
and the output cap each model gets by default. Pure.

Streamed text is kept well-formed: a server that slices UTF-16 text (JavaScript, Java, .NET) may
send the two halves of a character outside the Basic Multilingual Plane — an emoji — as JSON
escapes in two events (``"\\ud83d"``, then ``"\\ude00"``). Each piece alone decodes to a lone
surrogate, which no UTF-8 encoder takes: the text could be neither logged nor sent back. A
block's or a call's deltas hold back a high surrogate a piece ends with and join it to the low
half that starts the next; a surrogate left without its other half becomes U+FFFD."""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeGuard, final
from urllib.parse import urlsplit

import attrs

from effectagent.ai import (
    AssistantMessage,
    MalformedResponse,
    Message,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponsePart,
    ResponseTooLarge,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallContent,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    Usage,
    format_bytes,
)

from ._media import MediaSupport
from ._sse import DEFAULT_MAX_EVENT_BYTES

__all__ = [
    "Blocks",
    "CallIds",
    "StreamedCall",
    "as_int",
    "as_mapping",
    "as_timestamp",
    "capped_call_id",
    "default_max_tokens",
    "json_text",
    "positive_tokens",
    "reported_usage",
    "result_text",
    "well_formed",
]

#: A UTF-16 surrogate: half of a character outside the Basic Multilingual Plane.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: What a surrogate without its other half becomes.
REPLACEMENT = "\ufffd"


def well_formed(text: str) -> str:
    """``text`` with each surrogate pair joined into the character it encodes and each lone
    surrogate replaced by U+FFFD: text every UTF-8 encoder takes. (``text`` itself, at the cost
    of one scan, when it holds no surrogate — the usual case.)"""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _shown(held: str, piece: str) -> tuple[str, str]:
    """What of a streamed ``piece`` can be shown now, and what to hold back: ``held`` (a high
    surrogate the last piece ended with) and ``piece``, well-formed (:func:`well_formed`),
    keeping back a high surrogate they end with — the next piece may start with its low half."""
    if held:
        piece = held + piece
    elif piece.isascii() or _SURROGATE.search(piece) is None:
        return piece, ""
    if "\ud800" <= piece[-1] <= "\udbff":
        return well_formed(piece[:-1]), piece[-1]
    return well_formed(piece), ""


def as_int(value: object) -> int:
    """A token count from provider JSON: a non-negative int, else 0 (absent, null, junk)."""
    if type(value) is int and value > 0:
        return value
    if type(value) is float and value > 0 and value.is_integer():
        return int(value)
    return 0


def reported_usage(
    input_tokens: int,
    output_tokens: int,
    *,
    cache_read: int = 0,
    cache_write: int = 0,
    reasoning: int = 0,
    cache_write_long: int = 0,
) -> Usage:
    """The usage a provider reported, its parts kept within their totals: the cache reads, then
    the cache writes, are at most the input (of which they are parts), the long-lived writes at
    most the writes, the reasoning at most the output. A server's figures are untrusted — a part
    larger than its total would otherwise be priced as tokens that were never used."""
    cache_read = min(cache_read, input_tokens)
    cache_write = min(cache_write, input_tokens - cache_read)
    return Usage.of(
        input_tokens,
        output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
        reasoning=min(reasoning, output_tokens),
        cache_write_long=min(cache_write_long, cache_write),
    )


def as_timestamp(value: object) -> float | None:
    """Seconds since the epoch from provider JSON (an int or float), else None."""
    if type(value) is int or type(value) is float:
        return float(value)
    return None


def as_mapping(value: object, what: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else :class:`MalformedResponse` naming ``what``."""
    if isinstance(value, Mapping):
        return value
    raise MalformedResponse(f"{what} is not a JSON object")


def json_text(value: object) -> str:
    """Compact JSON text of a JSON value (non-ASCII kept as is)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def result_text(result: object) -> str:
    """A tool result as the text a provider takes: a string as it is, anything else as JSON."""
    return result if isinstance(result, str) else json_text(result)


@final
class Blocks:
    """The text and reasoning blocks of one response: at most one of each kind is open; opening
    one kind closes the other (a provider streams them one after the other). Block IDs are
    ``t<n>`` / ``r<n>`` in order of appearance."""

    __slots__ = ("_count", "_held_reasoning", "_held_text", "reasoning", "text")

    def __init__(self) -> None:
        self._count = 0
        self.text: str | None = None
        self.reasoning: str | None = None
        # A high surrogate the last delta of the open block ended with (see the module notes).
        self._held_text = ""
        self._held_reasoning = ""

    def text_delta(self, delta: str, out: list[ResponsePart]) -> None:
        """Append ``delta`` to the open text block, opening one (and closing reasoning) first."""
        if not delta:
            return
        block = self.text
        if block is None:
            self.end_reasoning(out)
            block = self.text = f"t{self._count}"
            self._count += 1
            out.append(TextStartPart(block))
        delta, self._held_text = _shown(self._held_text, delta)
        if delta:
            out.append(TextDeltaPart(block, delta))

    def reasoning_delta(self, delta: str, out: list[ResponsePart]) -> None:
        """Append ``delta`` to the open reasoning block, opening one (and closing text) first."""
        if not delta:
            return
        block = self.reasoning
        if block is None:
            self.end_text(out)
            block = self.reasoning = f"r{self._count}"
            self._count += 1
            out.append(ReasoningStartPart(block))
        delta, self._held_reasoning = _shown(self._held_reasoning, delta)
        if delta:
            out.append(ReasoningDeltaPart(block, delta))

    def end_text(self, out: list[ResponsePart]) -> None:
        """Close the open text block, if any."""
        if self.text is not None:
            if self._held_text:  # a high surrogate no low half followed
                out.append(TextDeltaPart(self.text, REPLACEMENT))
                self._held_text = ""
            out.append(TextEndPart(self.text))
            self.text = None

    def end_reasoning(self, out: list[ResponsePart]) -> None:
        """Close the open reasoning block, if any."""
        if self.reasoning is not None:
            if self._held_reasoning:
                out.append(ReasoningDeltaPart(self.reasoning, REPLACEMENT))
                self._held_reasoning = ""
            out.append(ReasoningEndPart(self.reasoning))
            self.reasoning = None

    def end_all(self, out: list[ResponsePart]) -> None:
        """Close whatever is open."""
        self.end_reasoning(out)
        self.end_text(out)


@final
class StreamedCall:
    """A tool call whose arguments are streaming: its ID, name and the argument text so far.

    A call is *ended* when its arguments are complete (params end), and *declared*
    (:class:`ToolCallPart`) only once the response finished for a reason other than the length
    limit — a call cut off by the limit stays undeclared, so the reducer reports it truncated and
    it never runs.

    The argument text is bounded: past ``max_bytes`` (as large as one server-sent event may be,
    by default) the call raises :class:`ResponseTooLarge` instead of keeping more."""

    __slots__ = ("_held", "arguments", "chunks", "id", "max_bytes", "name", "size")

    def __init__(
        self, call_id: str, name: str, *, max_bytes: int = DEFAULT_MAX_EVENT_BYTES
    ) -> None:
        self.id = call_id
        self.name = well_formed(name)  # a lone surrogate could not be sent back
        self.chunks: list[str] = []
        self.arguments: str | None = None
        self.size = 0
        self.max_bytes = max_bytes
        self._held = ""  # a high surrogate the last delta ended with (see the module notes)

    def delta(self, text: str, out: list[ResponsePart]) -> None:
        """More argument text."""
        if text:
            self.size += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            if self.size > self.max_bytes:
                raise ResponseTooLarge(
                    f"the arguments of tool call {self.name!r} grew past "
                    f"{format_bytes(self.max_bytes)}, the most a model adapter keeps of one "
                    "call; the stream was stopped there",
                    self.max_bytes,
                )
            text, self._held = _shown(self._held, text)
            if text:
                self.chunks.append(text)
                out.append(ToolParamsDeltaPart(self.id, text))

    def end(self, out: list[ResponsePart], arguments: str | None = None) -> None:
        """The arguments are complete: ``arguments`` when the provider restated them whole, else
        what streamed (``{}`` for a call that streamed nothing) — well-formed text either way."""
        if self._held:  # a high surrogate no low half followed
            self._held = ""
            self.chunks.append(REPLACEMENT)
            out.append(ToolParamsDeltaPart(self.id, REPLACEMENT))
        raw = well_formed(arguments) if arguments is not None else "".join(self.chunks)
        self.arguments = raw or "{}"
        out.append(ToolParamsEndPart(self.id))

    def declare(self, out: list[ResponsePart]) -> None:
        """Declare the ended call with its whole raw argument text."""
        if self.arguments is not None:
            out.append(ToolCallPart(self.id, self.name, self.arguments))


@final
class CallIds:
    """The tool-call IDs of one response, kept unique: an ID the request's history already holds
    (``taken``), or that an earlier call of this response had, gets a ``-<n>`` suffix that makes
    it new. The provider's IDs are the model's (or a server's) input, and the engine tells calls
    apart by their IDs; the request that replays the response carries the new ID on the call and
    on its result alike, so the provider sees a consistent history."""

    __slots__ = ("_taken",)

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken = set(taken)

    @staticmethod
    def of(messages: Iterable[Message]) -> CallIds:
        """The IDs of the tool calls ``messages`` hold, taken."""
        return CallIds(
            part.id
            for message in messages
            if type(message) is AssistantMessage
            for part in message.content
            if type(part) is ToolCallContent
        )

    def unique(self, call_id: str) -> str:
        """``call_id``, or a new ID made from it when it is taken; either is taken from now on.
        Well-formed (:func:`well_formed`) first: the ID goes back with the call and its result,
        and a lone surrogate in it would make that request one no SDK can encode."""
        call_id = well_formed(call_id)
        taken = self._taken
        if call_id in taken:
            n = 1
            while f"{call_id}-{n + 1}" in taken:
                n += 1
            call_id = f"{call_id}-{n + 1}"
        taken.add(call_id)
        return call_id


def capped_call_id(call_id: str, limit: int) -> str:
    """``call_id`` as an API that takes IDs of at most ``limit`` characters takes it: as it is
    when it fits, else its start and a digest of the whole ID (``limit`` characters in all), so
    a call and its result still match and two IDs never become one. An ID longer than the API
    takes is one another provider made (a server's ``chatcmpl-tool-<32 hex digits>``), in a
    conversation that moved to this one."""
    if len(call_id) <= limit:
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{call_id[: limit - len(digest) - 1]}_{digest}"


def _where(instance: object, attribute: attrs.Attribute[Any]) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive_seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a finite, positive number of seconds."""
    if not _is_number(value):
        raise TypeError(
            f"{_where(instance, attribute)} must be a number of seconds, got {type(value).__name__}"
        )
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"{_where(instance, attribute)} must be a positive number of seconds, got {value}"
        )


def valid_temperature(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a finite number ≥ 0, or None (the provider refuses what is past its
    own top)."""
    if value is None:
        return
    if not _is_number(value):
        raise TypeError(
            f"{_where(instance, attribute)} must be a number or None, got {type(value).__name__}"
        )
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{_where(instance, attribute)} must be a number ≥ 0, got {value}")


def http_url(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: an ``http://`` or ``https://`` URL with a host (and a port, when it
    names one, from 1 to 65535), or None. (Not echoed: a URL may hold credentials.)"""
    if value is None:
        return
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(f"{_where(instance, attribute)} must be an http:// or https:// URL")
    try:
        parts = urlsplit(value)
        host = parts.hostname
        if parts.port == 0:  # raises for a port that is not a number up to 65535
            host = None  # and no server listens on port 0
    except ValueError:
        host = None
    if not host or any(c.isspace() for c in value) or _unsendable(value):
        raise ValueError(
            f"{_where(instance, attribute)} must be an http:// or https:// URL with a host (a "
            "port, when given, a number from 1 to 65535; no spaces or control characters)"
        )


def _unsendable(text: str) -> bool:
    """Whether ``text`` holds a control character (a line break, NUL, …) or a lone surrogate
    (what bytes that were not UTF-8 decode to with ``surrogateescape``): neither can go into a
    request as the text it claims to be."""
    return any(unicodedata.category(char) in ("Cc", "Cs") for char in text)


def model_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a model's name — a non-empty str without surrounding spaces, control
    characters or lone surrogates."""
    if not isinstance(value, str):
        raise TypeError(f"{_where(instance, attribute)} must be a str, got {type(value).__name__}")
    if not value or value != value.strip() or _unsendable(value):
        raise ValueError(
            f"{_where(instance, attribute)} must be a model's name (text without control "
            f"characters or surrounding spaces), got {value!r}"
        )


def _optional_str(
    instance: object, attribute: attrs.Attribute[Any], value: object, none: str
) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(
            f"{_where(instance, attribute)} must be a str or None, got {type(value).__name__}"
        )
    if not value.strip():
        raise ValueError(f"{_where(instance, attribute)} must not be empty (None: {none})")


def optional_text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a non-empty str, or None."""
    _optional_str(instance, attribute, value, "left out")


def secret_text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: an API key — a non-empty str of printable ASCII (it is sent in a
    header), or None. (Never echoed.)"""
    _optional_str(instance, attribute, value, "the environment's")
    if isinstance(value, str) and _HEADER_VALUE.fullmatch(value) is None:
        raise ValueError(
            f"{_where(instance, attribute)} must be printable ASCII, as an API key is (its "
            "value is not shown)"
        )


def env_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: an environment variable's name, or None."""
    if value is None:
        return
    if not isinstance(value, str) or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) is None:
        raise ValueError(
            f"{_where(instance, attribute)} must name an environment variable, got {value!r}"
        )


def flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: True or False."""
    if not isinstance(value, bool):
        raise TypeError(
            f"{_where(instance, attribute)} must be True or False, got {type(value).__name__}"
        )


def optional_flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: True, False or None."""
    if value is not None:
        flag(instance, attribute, value)


#: An HTTP header's name: a token (RFC 9110).
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: A header value every HTTP stack sends as it is: printable ASCII, spaces and tabs — no line
#: break (which would start another header), no NUL, nothing an encoding could change.
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


def header_map(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: HTTP headers — a mapping of token names to values of printable ASCII.
    (A value is never echoed: headers carry tokens.)"""
    where = _where(instance, attribute)
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be a mapping of header names to str values")
    for name, text in value.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"{where} must have non-empty str names, got {type(name).__name__}")
        if _HEADER_NAME.fullmatch(name) is None:
            raise ValueError(
                f"{where} has {name!r}, which is not a header name (letters, digits and "
                "!#$%&'*+-.^_`|~)"
            )
        if not isinstance(text, str):
            raise TypeError(f"{where}[{name!r}] must be a str, got {type(text).__name__}")
        if _HEADER_VALUE.fullmatch(text) is None:
            raise ValueError(
                f"{where}[{name!r}] must be printable ASCII, without line breaks or other "
                "control characters (its value is not shown)"
            )


def body_map(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: request-body fields — a mapping with str keys."""
    where = _where(instance, attribute)
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be a mapping of body fields, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str) or not key:
            raise TypeError(f"{where} must have non-empty str keys, got {key!r}")


def media_setting(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a :class:`MediaSupport`, or None (the providers' table)."""
    if value is not None and not isinstance(value, MediaSupport):
        raise TypeError(
            f"{_where(instance, attribute)} must be a MediaSupport or None, got "
            f"{type(value).__name__}"
        )


def thinking_tokens(least: int) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """An attrs validator: a whole number of tokens ≥ ``least`` (the provider's own floor for
    what it means: -1 is Gemini's "let the model decide"), or None."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(
                f"{_where(instance, attribute)} must be an int or None, got {type(value).__name__}"
            )
        if value < least:
            raise ValueError(f"{_where(instance, attribute)} must be at least {least}, got {value}")

    return check


def positive_tokens(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a positive number of tokens (an int, not a bool), or None."""
    if value is None:
        return
    where = _where(instance, attribute)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where} must be a positive int or None, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{where} must be a positive number of tokens, got {value}")


def default_max_tokens(provider: str, model: str) -> int:
    """The output cap, in tokens, of a request to ``model`` that sets none — what the model's
    family takes: ``provider`` is ``"anthropic"``, ``"openai"``, ``"google"`` or
    ``"compatible"`` (somebody else's server, whose models are unknown here: a cap that small
    local models take). An adapter always sends a cap, so no response is unbounded."""
    name = model.lower()
    if provider == "anthropic":
        if name.startswith(("claude-3-opus", "claude-3-sonnet", "claude-3-haiku")):
            return 4096
        return 8192
    if provider == "openai":
        if name.startswith(("o1", "o3", "o4", "gpt-5", "gpt-4.1")):
            return 32768  # reasoning tokens count toward the cap
        if name.startswith(("gpt-4o", "chatgpt-4o")):
            return 16384
        if name.startswith(("gpt-3.5", "gpt-4")):
            return 4096
        return 16384
    if provider == "google":
        if name.startswith(("gemini-1.", "gemini-2.0")):
            return 8192
        return 65536  # Gemini 2.5 and later; thinking counts toward the cap
    if provider == "compatible":
        return 4096
    raise ValueError(f"unknown provider {provider!r}")

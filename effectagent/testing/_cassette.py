"""Cassettes: a model's requests and responses, one exchange a line, in a versioned JSON format.

The format (version 1) is JSON Lines, UTF-8:

* line 1, the header: ``{"cassette": "effectagent", "version": 1, "source": "record", "model":
  {"name": "openai-chat:gpt-4.1", "native_output": true}, "unchecked": []}``. ``source`` is
  ``"record"`` (a live model was recorded) or ``"export"`` (made from a stored conversation);
  ``unchecked`` names the request fields the cassette does not know, which a replay does not
  compare (an exported cassette has no tool set, for instance).
* every further line, one exchange: ``{"exchange": 1, "request": {...}, "parts": [...], "end":
  "complete"}``. ``request`` is the :class:`~effectagent.ai.ModelRequest` as JSON (``messages``,
  ``tools``, ``tool_choice``, ``max_output_tokens``, ``output``, ``metadata``; an image,
  document or audio part by its reference — kind, media type, name, size, SHA-256 digest — never
  its bytes); ``parts`` the
  response parts the model streamed, in order, each with its ``type``; ``end`` says how the
  stream ended — ``"complete"``, ``"error"`` (then ``error`` holds the typed model error, its
  ``_tag`` and fields, raised again on replay), ``"defect"`` (the model raised something that is
  not a model error) or ``"cut"`` (the consumer stopped reading: a replay serves the parts, then
  waits until it is closed).

Exchanges are numbered from 1 in the order the requests arrived; a line is written when its
exchange ends, so lines of concurrent exchanges may come out of order and are sorted on reading.
Everything a cassette holds was redacted when it was written.

Reading is strict: a line that is not JSON, or not the shape above, is a :class:`CassetteError`
naming the file and the line number; a cassette of another format version is refused with the
versions this release reads. Pure values and plain file I/O — no Trio here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal, TypeAlias, final

import attrs

from effectagent.ai import (
    AiError,
    AuthenticationFailed,
    ContentFiltered,
    ContextLengthExceeded,
    FinishPart,
    InputTokens,
    InvalidModelRequest,
    MalformedResponse,
    MediaPart,
    ModelNetworkError,
    ModelRequest,
    ModelUnavailable,
    NativeReasoningPart,
    ProviderError,
    RateLimited,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponseMetadataPart,
    ResponsePart,
    ResponseTooLarge,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolParamsStartPart,
    Usage,
)

__all__ = [
    "CASSETTE_VERSION",
    "Cassette",
    "CassetteError",
    "CassetteWriter",
    "End",
    "Exchange",
    "decode_error",
    "encode_error",
    "encode_part",
    "encode_request",
    "plain_json",
]

#: The cassette format this release writes (and the only one it reads).
CASSETTE_VERSION = 1
#: Format versions this release reads.
READABLE_VERSIONS = (1,)

#: How an exchange's stream ended (see the module notes).
End: TypeAlias = Literal["complete", "error", "defect", "cut"]
_ENDS = ("complete", "error", "defect", "cut")
#: The request fields a cassette may leave unchecked.
REQUEST_FIELDS = ("messages", "tools", "tool_choice", "max_output_tokens", "output", "metadata")


class CassetteError(ValueError):
    """A cassette that cannot be read (or written): the message names the file, and the line for
    a line that is not a valid exchange."""


@attrs.frozen
class Exchange:
    """One model call: the request (as JSON, redacted), the parts streamed, how it ended."""

    number: int
    request: Mapping[str, Any]
    parts: tuple[ResponsePart, ...]
    end: End = "complete"
    #: The model error of an ``"error"`` end; a defect's ``_tag`` and ``message`` for ``"defect"``.
    error: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The exchange's line, as a JSON object."""
        line: dict[str, Any] = {
            "exchange": self.number,
            "request": self.request,
            "parts": [encode_part(part) for part in self.parts],
            "end": self.end,
        }
        if self.error is not None:
            line["error"] = self.error
        return line


@final
@attrs.frozen
class Cassette:
    """A whole cassette: its header's fields and its exchanges, in request order."""

    exchanges: tuple[Exchange, ...]
    source: Literal["record", "export"] = "record"
    model: Mapping[str, Any] = attrs.field(factory=dict)
    unchecked: tuple[str, ...] = ()
    version: int = CASSETTE_VERSION

    def header(self) -> dict[str, Any]:
        """The header line, as a JSON object."""
        return header(self.source, self.model, self.unchecked)

    def write(self, path: str | Path) -> None:
        """Write the cassette to ``path`` (replaced if it exists)."""
        with CassetteWriter(
            path, source=self.source, model=self.model, unchecked=self.unchecked
        ) as writer:
            for exchange in self.exchanges:
                writer.write(exchange)

    @staticmethod
    def read(path: str | Path) -> Cassette:
        """The cassette at ``path``; :class:`CassetteError` for a file that is not one."""
        where = Path(path)
        try:
            text = where.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CassetteError(f"there is no cassette at {where}") from None
        except UnicodeDecodeError:
            raise CassetteError(f"{where} is not a cassette: it is not UTF-8 text") from None
        return parse(text, str(where))


def header(source: str, model: Mapping[str, Any], unchecked: Sequence[str] = ()) -> dict[str, Any]:
    """A header line's JSON object."""
    return {
        "cassette": "effectagent",
        "version": CASSETTE_VERSION,
        "source": source,
        "model": dict(model),
        "unchecked": list(unchecked),
    }


def _line(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


@final
class CassetteWriter:
    """Writes a cassette line by line: the header when opened, each exchange as it ends (flushed,
    so a run that crashes keeps what it recorded). A context manager; :meth:`close` is
    idempotent."""

    def __init__(
        self,
        path: str | Path,
        *,
        source: Literal["record", "export"] = "record",
        model: Mapping[str, Any] | None = None,
        unchecked: Sequence[str] = (),
    ) -> None:
        self.path = Path(path)
        try:
            self._file: IO[str] | None = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise CassetteError(
                f"cannot write the cassette {self.path}: {exc.strerror or exc}"
            ) from None
        self.write_line(header(source, model or {}, unchecked))

    def write(self, exchange: Exchange) -> None:
        """Append ``exchange``'s line."""
        self.write_line(exchange.to_json())

    def write_line(self, value: Mapping[str, Any]) -> None:
        """Append one JSON line and flush it."""
        if self._file is None:
            raise CassetteError(f"the cassette {self.path} is closed")
        self._file.write(_line(value))
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> CassetteWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# ---- encoding --------------------------------------------------------------------------------


def plain_json(value: Any, what: str = "a value") -> Any:
    """``value`` as plain JSON (dicts with string keys, lists, strings, finite numbers, booleans,
    None): attrs instances become objects of their fields, tuples lists. Raises
    :class:`CassetteError` naming ``what`` for anything else."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CassetteError(f"{what} holds {value}, which JSON cannot")
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CassetteError(f"{what} has a key that is not a string: {key!r}")
            out[key] = plain_json(item, what)
        return out
    if isinstance(value, list | tuple):
        return [plain_json(item, what) for item in value]
    if isinstance(value, MediaPart):  # by reference: a cassette never holds media bytes
        return plain_json(value.reference(), what)
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))
        first = [f for f in fields if f.name in ("type", "role")]
        return {
            f.name: plain_json(getattr(value, f.name), what)
            for f in (*first, *fields)
            if f.name != "media" or getattr(value, f.name)  # a tool result's, when it has some
        }
    raise CassetteError(f"{what} holds a {type(value).__name__}, which a cassette cannot keep")


def encode_request(request: ModelRequest) -> dict[str, Any]:
    """A request as the JSON object a cassette keeps."""
    encoded: dict[str, Any] = {
        "messages": plain_json(request.messages, "the request's messages"),
        "tools": [
            {
                "name": tool.name,
                "description": tool.description,
                "parameters": plain_json(tool.parameters, f"tool {tool.name!r}'s parameters"),
                "readonly": tool.readonly,
                "title": tool.title,
            }
            for tool in request.tools
        ],
        "tool_choice": request.tool_choice,
        "max_output_tokens": request.max_output_tokens,
        "output": None,
        "metadata": plain_json(request.metadata, "the request's metadata"),
    }
    output = request.output
    if output is not None:
        encoded["output"] = {
            "name": output.name,
            "schema": plain_json(output.schema, "the output schema"),
            "strict": output.strict,
        }
    return encoded


def encode_part(part: ResponsePart) -> dict[str, Any]:
    """A response part as JSON: its ``type`` and its fields (a finish part's usage nested)."""
    if isinstance(part, FinishPart):
        usage = part.usage
        return {
            "type": "finish",
            "reason": part.reason,
            "usage": {
                "input": plain_json(usage.input),
                "output": plain_json(usage.output),
            },
        }
    encoded: dict[str, Any] = plain_json(part, f"a {part.type} part")
    return encoded


#: The model errors a cassette can hold, by tag.
ERRORS: dict[str, type[AiError]] = {
    cls.__name__: cls
    for cls in (
        AiError,
        AuthenticationFailed,
        ContentFiltered,
        ContextLengthExceeded,
        InvalidModelRequest,
        MalformedResponse,
        ModelNetworkError,
        ModelUnavailable,
        ProviderError,
        RateLimited,
        ResponseTooLarge,
    )
}


def encode_error(error: AiError, redact: Callable[[str], str] = str) -> dict[str, Any]:
    """A model error as JSON: its ``_tag`` and its fields (the message passed through
    ``redact``). An error of a class of your own keeps its nearest known ancestor's tag."""
    cls: type[AiError] = type(error)
    while cls.__name__ not in ERRORS or ERRORS[cls.__name__] is not cls:
        cls = next(base for base in cls.__mro__[1:] if issubclass(base, AiError))
    fields = {f.name: getattr(error, f.name) for f in attrs.fields(cls)}
    fields["message"] = redact(str(fields.get("message", "")))
    return {"_tag": cls.__name__, **plain_json(fields, "a model error")}


def decode_error(value: Mapping[str, Any]) -> AiError:
    """The model error a cassette holds (see :func:`encode_error`)."""
    tag = value.get("_tag")
    cls = ERRORS.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise ValueError(f"the error's _tag {tag!r} is not a model error a cassette can hold")
    names = {f.name for f in attrs.fields(cls)}
    fields = {k: v for k, v in value.items() if k != "_tag"}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise ValueError(f"a {tag} error has no field {unknown[0]!r}")
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"a {tag} error: {exc}") from None


# ---- decoding --------------------------------------------------------------------------------

_PARTS: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        TextStartPart,
        TextDeltaPart,
        TextEndPart,
        ReasoningStartPart,
        ReasoningDeltaPart,
        ReasoningEndPart,
        NativeReasoningPart,
        ToolParamsStartPart,
        ToolParamsDeltaPart,
        ToolParamsEndPart,
        ToolCallPart,
        ResponseMetadataPart,
    )
}
_PART_TYPES: dict[str, type[Any]] = {
    str(attrs.fields_dict(cls)["type"].default): cls for cls in _PARTS.values()
}
_OUTPUT_TOKENS = type(Usage().output)


class _Bad(Exception):
    """A line that is JSON but not an exchange (said in a sentence)."""


def _decode_part(value: Any, index: int) -> ResponsePart:
    where = f"part {index + 1}"
    if not isinstance(value, dict):
        raise _Bad(f"{where} is not a JSON object")
    kind = value.get("type")
    if kind == "finish":
        usage = value.get("usage", {})
        try:
            return FinishPart(
                value["reason"],
                Usage(
                    InputTokens(**usage.get("input", {})), _OUTPUT_TOKENS(**usage.get("output", {}))
                ),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise _Bad(f"{where} (finish) is malformed: {exc}") from None
    cls = _PART_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise _Bad(f"{where} has the type {kind!r}, which a cassette cannot replay")
    fields = {k: v for k, v in value.items() if k != "type"}
    try:
        part: ResponsePart = cls(**fields)
    except TypeError as exc:
        raise _Bad(f"{where} ({kind}) is malformed: {exc}") from None
    return part


def _decode_exchange(value: Any) -> Exchange:
    if not isinstance(value, dict):
        raise _Bad("it is not a JSON object")
    for name in ("exchange", "request", "parts"):
        if name not in value:
            raise _Bad(f"it has no {name!r}")
    number = value["exchange"]
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise _Bad(f"its exchange number {number!r} is not a positive integer")
    request = value["request"]
    if not isinstance(request, dict):
        raise _Bad("its request is not a JSON object")
    parts = value["parts"]
    if not isinstance(parts, list):
        raise _Bad("its parts are not a JSON array")
    end = value.get("end", "complete")
    if end not in _ENDS:
        raise _Bad(f"its end {end!r} is none of {', '.join(_ENDS)}")
    error = value.get("error")
    if end in ("error", "defect"):
        if not isinstance(error, dict):
            raise _Bad(f"it ends with {end!r} but holds no error object")
        if end == "error":
            try:
                decode_error(error)  # checked now, raised again on replay
            except ValueError as exc:
                raise _Bad(str(exc)) from None
    return Exchange(
        number, request, tuple(_decode_part(p, i) for i, p in enumerate(parts)), end, error
    )


def _check_header(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or value.get("cassette") != "effectagent":
        raise CassetteError(
            f"{where} is not an effectagent cassette: its first line is not a cassette header "
            '(a JSON object with "cassette": "effectagent")'
        )
    version = value.get("version")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        if isinstance(version, int) and not isinstance(version, bool):
            newer = version > max(READABLE_VERSIONS)
            hint = (
                "it was written by a newer effectagent: upgrade to read it"
                if newer
                else "record it again with this release"
            )
            raise CassetteError(
                f"{where} is in cassette format version {version}; this release reads version "
                f"{readable} only — {hint}"
            )
        raise CassetteError(f"{where} has no valid format version (its header has {version!r})")
    source = value.get("source", "record")
    if source not in ("record", "export"):
        raise CassetteError(f"{where}: the header's source {source!r} is not record or export")
    unchecked = value.get("unchecked", [])
    if not isinstance(unchecked, list) or not set(unchecked) <= set(REQUEST_FIELDS):
        raise CassetteError(
            f"{where}: the header's unchecked must list request fields ({', '.join(REQUEST_FIELDS)})"
        )
    model = value.get("model", {})
    if not isinstance(model, dict):
        raise CassetteError(f"{where}: the header's model is not a JSON object")
    return value


def parse(text: str, where: str = "the cassette") -> Cassette:
    """The cassette ``text`` holds (``where`` names it in errors)."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise CassetteError(f"{where} is empty: a cassette starts with its header line")
    try:
        head = json.loads(lines[0])
    except ValueError:
        head = None
    fields = _check_header(head, where)
    exchanges: list[Exchange] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise CassetteError(f"{where}, line {number}: not JSON ({exc})") from None
        try:
            exchanges.append(_decode_exchange(value))
        except _Bad as exc:
            raise CassetteError(f"{where}, line {number}: not an exchange: {exc}") from None
    exchanges.sort(key=lambda exchange: exchange.number)
    for position, exchange in enumerate(exchanges, start=1):
        if exchange.number != position:
            problem = "twice" if exchange.number < position else f"but not exchange {position}"
            raise CassetteError(
                f"{where} holds exchange {exchange.number} {problem}: exchanges are numbered "
                "1, 2, 3, … without gaps"
            )
    return Cassette(
        tuple(exchanges),
        fields.get("source", "record"),
        fields.get("model", {}),
        tuple(fields.get("unchecked", ())),
        fields["version"],
    )


def parts_of(values: Iterable[Any]) -> tuple[ResponsePart, ...]:
    """Decode encoded parts (for tests and tools building cassettes by hand)."""
    try:
        return tuple(_decode_part(v, i) for i, v in enumerate(values))
    except _Bad as exc:
        raise ValueError(str(exc)) from None

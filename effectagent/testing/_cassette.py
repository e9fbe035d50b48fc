"""Cassettes: a model's requests and responses, one exchange a line, in a versioned JSON format.

The format (version 1) is JSON Lines, UTF-8:

* line 1, the header: ``{"cassette": "effectagent", "version": 1, "source": "record", "model":
  {"name": "openai-chat:gpt-4.1", "native_output": true}, "unchecked": []}``. ``source`` is
  ``"record"`` (a live model was recorded) or ``"export"`` (made from a stored conversation);
  ``unchecked`` names the request fields the cassette does not know, which a replay does not
  compare (an exported cassette has no tool set, for instance). ``model`` may also hold
  ``model_name``, the name the model's price is found by, where it is not the layer's ``name``
  (null: the model has none).
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
Everything a cassette holds was redacted when it was written. A cassette is written whole or not
at all: into a partial file beside it, moved over it when the writer closes
(:class:`CassetteWriter`).

Reading is strict: a line that is not JSON, or not the shape above — a part or a model error
whose fields have values of another type, a finish reason the engine does not know — is a
:class:`CassetteError` naming the file and the line number; a cassette of another format version
is refused with the versions this release reads. Pure values and plain file I/O — no Trio here.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import typing
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
    FinishReason,
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
#: The reasons a finish part may give (``effectagent.ai.FinishReason``).
FINISH_REASONS: tuple[str, ...] = typing.get_args(FinishReason)
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
        """Write the cassette to ``path`` (replaced in one step if it exists: see
        :class:`CassetteWriter`); a cassette that cannot be written as JSON is a
        :class:`CassetteError`, and a file at ``path`` is left as it was."""
        writer = CassetteWriter(
            path, source=self.source, model=self.model, unchecked=self.unchecked
        )
        try:
            for exchange in self.exchanges:
                writer.write(exchange)
        except BaseException:
            writer.discard()  # a file at ``path`` stays as it was
            raise
        writer.close()

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
        except OSError as exc:  # a directory, a file that cannot be read
            raise CassetteError(
                f"cannot read the cassette {where}: {exc.strerror or exc}"
            ) from None
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


#: Characters other readers split lines at (``str.splitlines`` among them): only ever inside a
#: JSON string, where their escapes mean the same.
_LINE_BREAKING = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def _line(value: Mapping[str, Any]) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.translate(_LINE_BREAKING) + "\n"


@final
class CassetteWriter:
    """Writes a cassette line by line, atomically: the header when opened, each exchange as it
    ends (flushed), all into a partial file beside ``path`` (``.<name>.<random>.partial``),
    which :meth:`close` moves over ``path`` in one step. So a cassette already at ``path`` is
    never seen half-written or truncated: it stays whole until the new one is complete.

    A context manager: leaving the block normally closes it (publishes). Leaving it by an
    exception — the recording did not end cleanly — never replaces a cassette: with one at
    ``path`` the partial file is closed and left where it is (:meth:`set_aside`), ``path`` as it
    was; with none, what was recorded is published all the same, so nothing recorded is lost. A
    process killed while recording leaves ``path`` as it was and the partial file beside it.
    :meth:`close`, :meth:`set_aside` and :meth:`discard` are idempotent."""

    def __init__(
        self,
        path: str | Path,
        *,
        source: Literal["record", "export"] = "record",
        model: Mapping[str, Any] | None = None,
        unchecked: Sequence[str] = (),
    ) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = None
        if self.path.is_dir():
            raise CassetteError(f"cannot write the cassette {self.path}: it is a directory")
        # A symbolic link is written through, as an open for writing would: its target replaced.
        target = self.path.resolve() if self.path.is_symlink() else self.path
        self._target = target
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
        try:
            # Exclusive: never someone else's file; created with the mode a plain open gives.
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as exc:
            raise CassetteError(
                f"cannot write the cassette {self.path}: {exc.strerror or exc}"
            ) from None
        self.partial = partial
        self._file = os.fdopen(fd, "w", encoding="utf-8")
        try:
            self.write_line(header(source, model or {}, unchecked))
        except BaseException:
            self.discard()
            raise

    def write(self, exchange: Exchange) -> None:
        """Append ``exchange``'s line."""
        self.write_line(exchange.to_json())

    def write_line(self, value: Mapping[str, Any]) -> None:
        """Append one JSON line and flush it."""
        if self._file is None:
            raise CassetteError(f"the cassette {self.path} is closed")
        try:
            line = _line(value)
        except (TypeError, ValueError) as exc:
            raise CassetteError(f"cannot write the cassette {self.path}: {exc}") from None
        self._file.write(line)
        self._file.flush()

    def close(self) -> None:
        """Close the file and move it over ``path`` (synced to disk first)."""
        file, self._file = self._file, None
        if file is None:
            return
        try:
            os.fsync(file.fileno())
        finally:
            file.close()
        try:
            os.replace(self.partial, self._target)
        except OSError as exc:
            raise CassetteError(
                f"cannot write the cassette {self.path}: {exc.strerror or exc} (what was "
                f"recorded is in {self.partial})"
            ) from None

    def discard(self) -> None:
        """Close the file and remove it, leaving ``path`` as it was (idempotent)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()
            self.partial.unlink(missing_ok=True)

    def set_aside(self) -> None:
        """Close the file and keep it as :attr:`partial`, leaving ``path`` as it was."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __enter__(self) -> CassetteWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None or not self._target.exists():
            self.close()
        else:
            self.set_aside()


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
    _check_fields(cls, fields, f"a {tag} error")
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


#: What a field of a part or a model error may hold, by its annotation: a hand-edited line with
#: a value of another type is refused when read, not handed to the engine on replay.
_FIELD_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "str | None": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "int": (lambda v: type(v) is int, "a whole number"),
    "int | None": (lambda v: v is None or type(v) is int, "a whole number or null"),
    "float | None": (
        lambda v: v is None or (type(v) in (int, float) and math.isfinite(v)),
        "a finite number or null",
    ),
    "Mapping[str, Any]": (lambda v: isinstance(v, dict), "a JSON object"),
}


def _check_fields(cls: type[Any], fields: Mapping[str, Any], what: str) -> None:
    """Raise ``ValueError`` naming the first of ``fields`` whose value ``cls``'s annotation of
    it does not allow (a field with an annotation not listed above is left to ``cls``)."""
    for field in attrs.fields(cls):
        if field.name not in fields:
            continue
        check = _FIELD_CHECKS.get(str(field.type))
        if check is not None and not check[0](fields[field.name]):
            raise ValueError(
                f"{what}'s {field.name} must be {check[1]}, got {fields[field.name]!r:.60}"
            )


def _decode_part(value: Any, index: int) -> ResponsePart:
    where = f"part {index + 1}"
    if not isinstance(value, dict):
        raise _Bad(f"{where} is not a JSON object")
    kind = value.get("type")
    if kind == "finish":
        usage = value.get("usage", {})
        if value.get("reason") not in FINISH_REASONS:
            raise _Bad(
                f"{where} (finish) is malformed: its reason {value.get('reason')!r:.60} is none "
                f"of {', '.join(FINISH_REASONS)}"
            )
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
        _check_fields(cls, fields, f"{where} ({kind})")
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    try:
        part: ResponsePart = cls(**fields)
    except (TypeError, ValueError) as exc:
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
    for name in ("messages", "tools"):
        if name in request and not isinstance(request[name], list):
            raise _Bad(f"its request's {name} are not a JSON array")
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
        elif not isinstance(error.get("_tag", ""), str) or not isinstance(
            error.get("message", ""), str
        ):
            raise _Bad("its defect's _tag and message must be strings")
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
    if type(version) is not int or version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        if type(version) is int:
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
    if not isinstance(unchecked, list) or any(name not in REQUEST_FIELDS for name in unchecked):
        raise CassetteError(
            f"{where}: the header's unchecked must list request fields ({', '.join(REQUEST_FIELDS)})"
        )
    model = value.get("model", {})
    if not isinstance(model, dict):
        raise CassetteError(f"{where}: the header's model is not a JSON object")
    if not isinstance(model.get("name", ""), str):
        raise CassetteError(f"{where}: the header's model name is not a string")
    if not isinstance(model.get("native_output", False), bool):
        raise CassetteError(f"{where}: the header's model native_output is not true or false")
    if not isinstance(model.get("model_name", ""), str | None):
        raise CassetteError(f"{where}: the header's model model_name is not a string or null")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(line: str) -> Any:
    """One line's JSON value; a ``ValueError`` for what is not JSON — ``NaN`` and the
    infinities included, which Python's reader would take and no cassette holds."""
    return json.loads(line, parse_constant=_no_constant)


def parse(text: str, where: str = "the cassette") -> Cassette:
    """The cassette ``text`` holds (``where`` names it in errors)."""
    # JSON Lines end at "\n" (a "\r" before it is whitespace to JSON) — not wherever
    # ``splitlines`` would break, which includes characters a JSON string may hold as they are.
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    if not lines or not lines[0].strip():
        raise CassetteError(f"{where} is empty: a cassette starts with its header line")
    try:
        head = _loads(lines[0])
    except ValueError as exc:
        if lines[0].lstrip().startswith('{"cassette"'):  # a header cut short, or edited
            raise CassetteError(
                f"{where} is not an effectagent cassette: its header line is not JSON ({exc}); "
                "was the file cut short?"
            ) from None
        head = None
    fields = _check_header(head, where)
    exchanges: list[Exchange] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            value = _loads(line)
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

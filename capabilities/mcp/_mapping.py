"""Pure mapping between the protocol's JSON and our tools: names, annotations, schemas, results.

Nothing here does I/O or imports the SDK: it works on the JSON form of the protocol's objects
(``model_dump(by_alias=True, mode="json", exclude_none=True)``), so it is cheap to import and
tested without a server.

A tool result becomes one JSON object, the *envelope*::

    {"server": {"name": ..., "version": ..., "protocol_version": ...},
     "tool": "<the server's own name of the tool>",
     "content": [ ...every content block as the server sent it... ],
     "structured": { ... }}            # only when the server sent structured content

Content blocks keep every field the server gave — ``type``, ``text``, ``mimeType``, ``uri``,
base64 ``data``/``blob`` as they are, annotations and ``_meta`` — so nothing is lost on the way;
the whole envelope is bounded by ``max_result_bytes``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import jsonschema

from effectagent.ai import DEFAULT_ARGUMENT_LIMITS, OutputSchemaViolation
from effectagent.effect import SchemaIssue

from ._errors import McpResultTooLarge, McpToolError, ServerIdentity
from ._schemas import schema_trouble

__all__ = [
    "ServerIdentity",
    "bounded_text",
    "check_structured",
    "structured_check",
    "ToolShape",
    "encoded_size",
    "envelope",
    "error_message",
    "local_names",
    "tool_shape",
]

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def local_names(prefix: str | None, remote: Iterable[str]) -> dict[str, str]:
    """The name the model sees for each remote tool name, in the order given.

    Characters a provider refuses become ``_``, the prefix (if any) comes first as
    ``prefix_name``, and a name longer than 64 characters is cut. When two remote names end up
    the same, or a name had to be changed and could clash, the later one gets ``_`` and eight hex
    digits of a digest of its remote name — so the mapping is stable for a given listing.
    """
    taken: set[str] = set()
    out: dict[str, str] = {}
    for name in remote:
        base = _NOT_ALLOWED.sub("_", name) or "tool"
        if prefix is not None:
            base = f"{prefix}_{base}"
        candidate = base[:_MAX_NAME]
        if candidate in taken:
            candidate = f"{base[: _MAX_NAME - 9]}_{_digest(name)}"
        index = 1
        while candidate in taken:  # only for names made to clash on purpose
            candidate = f"{base[: _MAX_NAME - 14]}_{_digest(name)}_{index}"
            index += 1
        taken.add(candidate)
        out[name] = candidate
    return out


@attrs.frozen
class ToolShape:
    """What a remote tool definition becomes: the keyword arguments of ``Tool.dynamic`` that
    describe it — ``success_schema`` is None unless an output schema is bound in it — and
    ``output_validator``, the check of structured content that could not be bound (None when it
    is bound, or there is no output schema)."""

    description: str
    parameters_schema: dict[str, Any]
    success_schema: dict[str, Any] | None
    annotations: dict[str, Any]
    output_validator: jsonschema.protocols.Validator | None = attrs.field(eq=False, default=None)


class UnusableTool(ValueError):
    """A remote tool definition that cannot become a tool; the message says why."""


def _refs(value: Any) -> Iterable[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "$ref" and isinstance(item, str):
                yield item
            else:
                yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def _bindable(output: Mapping[str, Any]) -> bool:
    """True when ``output`` still means the same once nested in the envelope with its
    definitions moved to the root: an object schema with no ``$id`` whose references all point
    into ``$defs`` or ``definitions``."""
    if output.get("type") != "object" or "$id" in output:
        return False
    return all(ref.startswith(("#/$defs/", "#/definitions/")) for ref in _refs(output))


def tool_shape(server: str, remote: Mapping[str, Any]) -> ToolShape:
    """Map one tool of a ``tools/list`` answer (its JSON form) to the shape of a dynamic tool.

    The input schema must be a valid JSON Schema describing an object; an output schema must be
    valid too, and no check against either may recurse without end or past the stack (see
    ``_schemas``: a ``$ref`` loop, a schema too deep). An object-shaped output schema is bound as
    the success schema (the envelope's ``structured``, required, with the schema's definitions
    moved to the root), so the engine checks structured content against it at the tool boundary;
    any other output schema is compiled into ``output_validator`` for the handler to check.
    Raises :class:`UnusableTool` otherwise.
    """
    name = str(remote.get("name", ""))
    description = remote.get("description") or f"The tool {name!r} of the MCP server {server!r}."
    parameters = remote.get("inputSchema")
    if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
        raise UnusableTool(f"its input schema does not describe an object: {_shown(parameters)}")
    problem = _schema_problem(parameters, ARGUMENT_LEVELS)
    if problem is not None:
        raise UnusableTool(f"its input schema {problem}")
    # The envelope's frame is built by ``envelope``, so only the structured content needs a
    # check on every call (the engine runs the success schema over each result): without an
    # output schema there is no success schema at all.
    success: dict[str, Any] | None = None
    validator: jsonschema.protocols.Validator | None = None
    output = remote.get("outputSchema")
    if output is not None:
        if not isinstance(output, Mapping):
            raise UnusableTool(f"its output schema is not a JSON object: {_shown(output)}")
        problem = _schema_problem(output, STRUCTURED_LEVELS + 1)
        if problem is not None:
            raise UnusableTool(f"its output schema {problem}")
        if _bindable(output):
            nested = {
                k: v for k, v in output.items() if k not in ("$defs", "definitions", "$schema")
            }
            success = {
                "type": "object",
                "properties": {"structured": nested},
                "required": ["structured"],
            }
            for keyword in ("$defs", "definitions"):
                if keyword in output:
                    success[keyword] = output[keyword]
        else:
            validator = jsonschema.Draft202012Validator(dict(output))
    annotations = remote.get("annotations") or {}
    readonly = annotations.get("readOnlyHint") is True
    destructive = annotations.get("destructiveHint")
    options: dict[str, Any] = {
        "readonly": readonly,
        "destructive": None if readonly or not isinstance(destructive, bool) else destructive,
        "idempotent": annotations.get("idempotentHint") is True,
        "open_world": annotations.get("openWorldHint") is not False,
        "title": remote.get("title") or annotations.get("title"),
    }
    return ToolShape(str(description), dict(parameters), success, options, validator)


#: The deepest value a check of a tool's arguments sees, plus one: the engine decodes arguments
#: at most ``DEFAULT_ARGUMENT_LIMITS.max_depth`` levels deep before it checks them.
ARGUMENT_LEVELS = DEFAULT_ARGUMENT_LIMITS.max_depth + 1

# A schema's JSON text -> what is wrong with it (None: nothing), for the schemas seen lately: a
# listing with many tools of one schema checks it once, and a re-listing not at all.
_VERDICTS: dict[tuple[str, int | None], str | None] = {}
_MAX_VERDICTS = 1024


def _schema_problem(schema: Mapping[str, Any], value_levels: int | None) -> str | None:
    """Why ``schema`` cannot check a tool's values, as a clause ("is not a valid JSON Schema:
    ...", "refers to itself without end ..."), or None. The recursion it could cause is judged
    first (``_schemas``), by a walk of its own, so a hostile schema cannot exhaust the stack of
    ``check_schema`` either."""
    trouble = schema_trouble(schema, value_levels)
    if trouble is not None:
        return trouble
    key = (json.dumps(schema, sort_keys=True), value_levels)
    if key in _VERDICTS:
        return _VERDICTS[key]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        verdict: str | None = f"is not a valid JSON Schema: {exc.message}"
    else:
        verdict = None
    if len(_VERDICTS) >= _MAX_VERDICTS:
        _VERDICTS.clear()
    _VERDICTS[key] = verdict
    return verdict


def _shown(value: object) -> str:
    """``value``'s repr, cut to a few hundred characters: a refusal quotes what it refused."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}... ({len(text)} characters)"


#: How deep the structured content of a tool with an output schema may nest: as deep as the
#: arguments the engine checks, so that the output schema is judged like the input schema.
STRUCTURED_LEVELS = ARGUMENT_LEVELS - 1


def structured_check(shape: ToolShape) -> Callable[[Mapping[str, Any]], None] | None:
    """What the handler checks of each envelope of a tool of ``shape`` before handing it over
    (None: nothing) — for a tool with an output schema, that its structured content is at most
    :data:`STRUCTURED_LEVELS` deep (its output schema was judged for that depth, ``_schemas``),
    then the output schema that could not be bound (:func:`check_structured`). Raises
    ``OutputSchemaViolation``."""
    validator = shape.output_validator
    if validator is None and shape.success_schema is None:
        return None

    def check(body: Mapping[str, Any]) -> None:
        if "structured" in body and _deeper_than(body["structured"], STRUCTURED_LEVELS):
            raise OutputSchemaViolation(
                "result violates its schema: its structured content is nested deeper than "
                f"{STRUCTURED_LEVELS} levels, too deep to check"
            )
        if validator is not None:
            check_structured(body, validator)

    return check


def _deeper_than(value: Any, levels: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > levels:
                return True
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            if depth > levels:
                return True
            stack.extend((child, depth + 1) for child in item)
    return False


def check_structured(body: Mapping[str, Any], validator: jsonschema.protocols.Validator) -> None:
    """Check an envelope's structured content against an output schema that could not be bound
    as the success schema; raises ``OutputSchemaViolation`` naming each problem (at most 20)."""
    if "structured" not in body:
        raise OutputSchemaViolation(
            "result violates its schema: the tool declares an output schema but sent no "
            "structured content"
        )
    try:
        errors = sorted(validator.iter_errors(body["structured"]), key=str)
    except RecursionError:
        raise OutputSchemaViolation(
            "result violates its schema: its structured content is nested too deep to check"
        ) from None
    if errors:
        issues = tuple(_issue(error) for error in errors[:20])
        raise OutputSchemaViolation(
            "result violates its schema: " + "; ".join(f"{i.path}: {i.message}" for i in issues),
            issues,
        )


def _issue(error: Any) -> SchemaIssue:
    path = "$.structured" + "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
    )
    return SchemaIssue(path, error.message)


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON — the measure of every size limit here."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def envelope(
    identity: ServerIdentity, tool: str, local: str, result: Mapping[str, Any], limit: int
) -> dict[str, Any]:
    """The envelope of a successful result (its JSON form), or :class:`McpResultTooLarge` when it
    is over ``limit`` bytes. ``tool`` is the server's name of the tool, ``local`` ours."""
    body: dict[str, Any] = {
        "server": identity.as_json(),
        "tool": tool,
        "content": list(result.get("content") or ()),
    }
    if "structuredContent" in result:
        body["structured"] = result["structuredContent"]
    size = encoded_size(body)
    if size > limit:
        raise McpResultTooLarge(local, size, limit, identity)
    return body


def _describe_block(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource":
        inner = block.get("resource") or {}
        if "text" in inner:
            return str(inner["text"])
        return f"[resource {inner.get('uri', '?')} ({inner.get('mimeType', 'unknown type')})]"
    if kind == "resource_link":
        return f"[link {block.get('uri', '?')}]"
    return f"[{kind} ({block.get('mimeType', 'unknown type')})]"


def error_message(
    tool: str,
    result: Mapping[str, Any],
    limit: int,
    redact: Callable[[str], str] = str,
    server: ServerIdentity | None = None,
) -> McpToolError:
    """The declared failure for an ``isError`` result: its content as text (text blocks as they
    are, other blocks named by kind, type and URI), passed through ``redact`` (the connection's
    masking of its secrets: a server that says back the header or the query it was sent), then
    cut to ``limit`` bytes. ``server`` is who answered."""
    parts = [_describe_block(block) for block in result.get("content") or ()]
    message = "\n".join(part for part in parts if part) or f"the tool {tool!r} reported an error"
    return McpToolError(tool, bounded_text(redact(message), limit), server=server)


def bounded_text(text: str, limit: int) -> str:
    """``text`` if its UTF-8 form fits in ``limit`` bytes, else its start and a note saying where
    it was cut, together within ``limit`` bytes."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    note = f" ... [cut at {limit} bytes]"
    return encoded[: max(0, limit - len(note))].decode(errors="ignore") + note

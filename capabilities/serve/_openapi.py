"""The OpenAPI 3.1 document, derived from the endpoint table and the very types the handlers
decode and encode (``_api``) — JSON Schema from ``effectagent.effect.json_schema`` — so it says
what is served; the paths served apart from the table (the document itself, the console's files)
are listed too. Pure; computed once."""

from __future__ import annotations

import functools
import re
from typing import Any, Final

from effectagent.effect import json_schema

from ._api import ENDPOINTS, Endpoint
from ._console import CONSOLE_FILES
from ._problems import MEDIA_TYPE, PROBLEM_TYPES

__all__ = ["openapi_document"]

_PARAMETER: Final = re.compile(r"\{([a-z_]+)\}")
_PROBLEM_SCHEMA: Final = {
    "type": "object",
    "description": "An RFC 9457 problem document.",
    "properties": {
        "type": {"type": "string", "format": "uri-reference"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
    },
    "required": ["type", "title", "status", "detail", "instance"],
}


def _relocated(value: Any) -> Any:
    """``value`` with every ``#/$defs/X`` reference made ``#/components/schemas/X``."""
    if isinstance(value, dict):
        return {
            k: (
                v.replace("#/$defs/", "#/components/schemas/")
                if k == "$ref" and isinstance(v, str)
                else _relocated(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_relocated(v) for v in value]
    return value


def _schema(kind: type, components: dict[str, Any]) -> dict[str, str]:
    """A reference to ``kind``'s schema, added (with what it refers to) to ``components``."""
    schema = json_schema(kind)
    schema.pop("$schema", None)
    definitions: dict[str, Any] = schema.pop("$defs", {})  # type: ignore[assignment]
    for name, definition in definitions.items():
        components.setdefault(name, _relocated(definition))
    components.setdefault(kind.__name__, _relocated(schema))
    return {"$ref": f"#/components/schemas/{kind.__name__}"}


#: The headers a problem of a status carries (a client generated from the document reads them).
_PROBLEM_HEADERS: Final[dict[int, dict[str, Any]]] = {
    401: {
        "WWW-Authenticate": {
            "description": "The scheme to authenticate with: Bearer.",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Whole seconds until the principal's quota admits a submission.",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
        }
    },
    503: {
        "Retry-After": {
            "description": "Whole seconds to wait before trying again (or another instance).",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
        }
    },
}


def _problem(status: int) -> dict[str, Any]:
    titles = "; ".join(t for s, t in PROBLEM_TYPES.values() if s == status)
    response: dict[str, Any] = {
        "description": titles,
        "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    if status in _PROBLEM_HEADERS:
        response["headers"] = _PROBLEM_HEADERS[status]
    return response


def _operation(endpoint: Endpoint, components: dict[str, Any]) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAMETER.findall(endpoint.path)
    ]
    parameters += [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
        for name in endpoint.query
    ]
    parameters += [
        {"name": name, "in": "header", "required": False, "schema": {"type": "string"}}
        for name in endpoint.headers
    ]
    if endpoint.answer is not None:
        content = {endpoint.media: {"schema": _schema(endpoint.answer, components)}}
    else:
        content = {endpoint.media: {"schema": {"type": "string"}}}
    responses: dict[str, Any] = {
        str(endpoint.status): {"description": endpoint.summary, "content": content}
    }
    statuses = {400, 500, 503, *endpoint.refusals}
    if endpoint.access != "anyone":
        statuses |= {401, 404}
    if endpoint.access == "operator":
        statuses.add(403)
    if endpoint.body is not None:
        statuses |= {408, 409, 413, 415, 422}
    for status in sorted(statuses | set(endpoint.also)):
        responses[str(status)] = (
            {"description": endpoint.summary, "content": content}
            if status in endpoint.also
            else _problem(status)
        )
    operation: dict[str, Any] = {
        "operationId": endpoint.name,
        "summary": endpoint.summary,
        "parameters": parameters,
        "responses": responses,
    }
    if endpoint.description:
        operation["description"] = endpoint.description
    if endpoint.access == "anyone":
        operation["security"] = []
    if endpoint.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _schema(endpoint.body, components)}},
        }
    return operation


def _served_apart(name: str, summary: str, media: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A GET of a path served apart from the endpoint table: anyone's, never refused."""
    return {
        "operationId": name,
        "summary": summary,
        "parameters": [],
        "security": [],
        "responses": {"200": {"description": summary, "content": {media: {"schema": schema}}}},
    }


@functools.cache
def _document() -> dict[str, Any]:
    components: dict[str, Any] = {"Problem": _PROBLEM_SCHEMA}
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(
            endpoint, components
        )
    paths["/openapi.json"] = {
        "get": _served_apart(
            "openapi", "This document (OpenAPI 3.1).", "application/json", {"type": "object"}
        )
    }
    for path, (file, media) in CONSOLE_FILES.items():
        name = "console" + ("" if path == "/console" else "_" + file.rpartition(".")[2])
        paths[path] = {
            "get": _served_apart(
                name,
                f"The operator console's {file}.",
                media.split(";")[0],
                {"type": "string"},
            )
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "effectagent serve",
            "version": "1",
            "description": "The durable runtime over HTTP: submissions, their status and "
            "settlement, conversations' events (SSE), approvals, steering, abort, sessions "
            "and search. Errors are RFC 9457 problem documents. Each path answers exactly the "
            "methods listed for it: another method — HEAD included, and OPTIONS unless it is a "
            "CORS preflight of an allowed origin — is answered 405 with an Allow header; a path "
            "not listed (one with a trailing slash added included) 404.",
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def openapi_document() -> dict[str, Any]:
    """The document (a fresh copy each call is not needed: callers only serialize it)."""
    return _document()

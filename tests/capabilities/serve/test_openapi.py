"""The OpenAPI document is derived from the endpoint table and the types the handlers use: it
lists exactly the operations the app routes, and its schemas are those types' schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.routing import Route

from capabilities.durable import Receipt
from capabilities.serve import ENDPOINTS, ServeApi, openapi_document
from capabilities.serve._api import SubmitBody
from capabilities.serve._console import CONSOLE_FILES
from capabilities.storage import open_database
from effectagent.effect import json_schema

from .support import settings


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        for item in value.values():
            found |= _refs(item)
        return found
    if isinstance(value, list):
        return set().union(*map(_refs, value)) if value else set()
    return set()


async def test_the_document_lists_exactly_the_routed_operations(tmp_path: Path) -> None:
    """Every route, with exactly its methods: the document itself and the console's files were
    routed but not listed, and so was the HEAD Starlette adds to every GET route."""
    document = openapi_document()
    assert document["openapi"] == "3.1.0"
    listed = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
    }
    served_apart = {("GET", "/openapi.json")} | {("GET", path) for path in CONSOLE_FILES}
    assert listed == {(e.method, e.path) for e in ENDPOINTS} | served_apart
    async with open_database(tmp_path / "serve.db") as database:
        app = ServeApi(database, settings()).app
        routed = {
            (method, route.path)
            for route in app.routes
            if isinstance(route, Route)
            for method in route.methods or set()
        }
    assert routed == listed


def test_its_schemas_are_the_types_schemas_and_every_reference_resolves() -> None:
    document = openapi_document()
    schemas = document["components"]["schemas"]
    for kind in (SubmitBody, Receipt):
        expected = json_schema(kind)
        expected.pop("$schema")
        assert schemas[kind.__name__] == expected
    submit = document["paths"]["/v1/conversations/{conversation_id}/submissions"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SubmitBody"
    }
    assert {"202", "401", "404", "413", "429"} <= set(submit["responses"])
    for reference in _refs(document):
        assert reference.startswith("#/components/schemas/")
        assert reference.removeprefix("#/components/schemas/") in schemas


def test_the_events_operation_says_live_text_has_no_id_and_is_not_resumed() -> None:
    events = openapi_document()["paths"]["/v1/conversations/{conversation_id}/events"]["get"]
    said = events["description"]
    for needed in ("'delta'", "{run_id, text}", "WITHOUT an id", "Last-Event-ID", "whole text"):
        assert needed in said


def test_what_readiness_retry_and_the_served_apart_paths_answer_is_documented() -> None:
    """``/readyz`` answered 503 with its JSON Readiness, documented as a problem document; a
    retry of a submission that is not dead-lettered answered an undocumented 409."""
    paths = openapi_document()["paths"]
    unready = paths["/readyz"]["get"]["responses"]["503"]
    assert unready["content"] == {
        "application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}
    }
    assert "409" in paths["/v1/submissions/{submission_id}/retry"]["post"]["responses"]
    assert "429" not in paths["/v1/submissions/{submission_id}/retry"]["post"]["responses"]
    assert "application/json" in paths["/openapi.json"]["get"]["responses"]["200"]["content"]
    assert "text/html" in paths["/console"]["get"]["responses"]["200"]["content"]
    for path in ("/openapi.json", "/console"):
        assert paths[path]["get"]["security"] == []
    overdue = paths["/v1/overdue"]["get"]
    assert "86,400" in overdue["summary"]


def test_the_headers_a_client_must_read_from_a_refusal_are_documented() -> None:
    """A 429 and a 503 problem carry Retry-After and a 401 WWW-Authenticate, but the document
    named none of them: a client generated from it could not know when to try again."""
    paths = openapi_document()["paths"]
    submit = paths["/v1/conversations/{conversation_id}/submissions"]["post"]["responses"]
    for status, header in (
        ("429", "Retry-After"),
        ("503", "Retry-After"),
        ("401", "WWW-Authenticate"),
    ):
        assert submit[status]["headers"][header]["required"] is True
    for operations in paths.values():
        for operation in operations.values():
            unavailable = operation["responses"].get("503", {})
            if "application/problem+json" in unavailable.get("content", {}):
                assert "Retry-After" in unavailable["headers"]
    assert "headers" not in paths["/readyz"]["get"]["responses"]["503"]  # not a problem

"""The declarations a model writes its program against: TypeScript rendered from the encoded JSON
Schemas of the selected tools — golden files for a representative set, TypeScript's own checker
for their validity, and every construct that cannot be rendered refused with its path.

Regenerate the golden files after an intended change with ``UPDATE_GOLDEN=1`` and read the diff.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypedDict

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.code_mode._declarations import render_declarations
from capabilities.code_mode._errors import UnrenderableSchema
from capabilities.code_mode._plan import plan
from effectagent import TaggedError, Tool, tool
from effectagent.effect import field_meta

GOLDEN = Path(__file__).parent / "golden"
DENO = str(Path(os.environ.get("VIRTUAL_ENV", ".venv")) / "bin" / "deno")


def declarations(namespaces: Mapping[str, Iterable[Tool[Any, Any]]]) -> str:
    """The declarations of ``namespaces`` (as ``code_mode(namespaces).declarations``)."""
    return render_declarations("run_program", plan("run_program", namespaces))


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


# ---- a representative set of tools --------------------------------------------------------------


class Unit(enum.Enum):
    """A temperature unit."""

    CELSIUS = "c"
    FAHRENHEIT = "f"


@attrs.frozen
class Place:
    """Where a reading was taken."""

    name: str
    lat: float = attrs.field(
        metadata=field_meta(description="Latitude, in degrees.", ge=-90, le=90)
    )
    lon: float = attrs.field(metadata=field_meta(ge=-180, le=180))


@attrs.frozen
class Reading:
    """One reading.

    Readings are taken hourly; a missing one is null, never zero.
    """

    place: Place
    value: float | None
    unit: Unit = Unit.CELSIUS
    tags: frozenset[str] = frozenset()


@attrs.frozen
class Node:
    """A node of a category tree."""

    label: str = attrs.field(metadata=field_meta(min_length=1, max_length=40))
    children: list[Node] = attrs.field(factory=list)


@dataclasses.dataclass(frozen=True)
class Window:
    """A time window (ISO 8601 dates)."""

    start: str
    end: str | None = None


class Options(TypedDict, total=False):
    """Search options."""

    limit: int
    sort: Literal["asc", "desc"]


@attrs.frozen
class NotFound(TaggedError):
    """Nothing matched."""

    query: str


@attrs.frozen
class Throttled(TaggedError):
    """Too many requests."""


@tool(readonly=True, errors=(NotFound, Throttled))
async def readings(
    place: Place,
    window: Window,
    unit: Unit = Unit.CELSIUS,
    hours: list[int] | None = None,
    options: Options | None = None,
) -> list[Reading]:
    """Readings at a place over a time window.

    Use `hours` to pick hours of the day. A comment closer */ is harmless here.

    Args:
        place: Where.
        window: When.
        unit: The unit of every value.
        hours: Hours of the day (0-23); all when absent.
        options: Paging and order.
    """
    return []


@tool(readonly=True)
async def categories(root: Node, depth: int = 1) -> Node:
    """The category tree under a root.

    Args:
        root: The tree to start from.
        depth: How deep to go.
    """
    return root


@tool(readonly=True)
async def stats(
    values: list[float], pair: tuple[str, int], scores: dict[str, float], flag: bool = False
) -> dict[str, Any]:
    """Summary statistics.

    Args:
        values: The sample.
        pair: A name and a weight.
        scores: Named scores.
        flag: Whether to include the raw sample.
    """
    return {}


@tool(readonly=True)
async def ping() -> None:
    """Says the service is up."""


LEGACY = Tool.dynamic(
    "legacy-search",
    "Search the legacy index (a tool mapped from another server).",
    {
        "type": "object",
        "title": "Query",
        "properties": {
            "q": {"type": "string", "description": "Query text.", "examples": ["oslo weather"]},
            "mode": {"const": "fast"},
            "since": {"type": ["string", "null"], "format": "date"},
            "page": {"type": "integer", "minimum": 1, "deprecated": True},
            "filters": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
            },
            "extra": True,
            "point": {
                "type": "array",
                "prefixItems": [{"type": "number"}, {"type": "number"}, {"type": "string"}],
                "items": False,
                "minItems": 2,
            },
            "when": {"$ref": "#/definitions/Date"},
            "either": {"oneOf": [{"type": "string"}, {"$ref": "#/definitions/Date"}]},
            "labelled": {"type": "array", "items": {"type": "string", "description": "A label."}},
            "maybe": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": ["string", "null"]}],
                "items": False,
                "minItems": 1,
            },
            "open": {
                "type": "array",
                "items": {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]},
            },
        },
        "required": ["q", "api-version"],
        "definitions": {
            "Date": {"type": "object", "properties": {"y": {"type": "integer"}}, "required": ["y"]}
        },
    },
    success_schema={"type": "object", "properties": {"hits": {"type": "integer"}}},
    readonly=True,
)

NAMESPACES: dict[str, list[Tool[Any, Any]]] = {
    "weather": [readings, stats],
    "catalog": [categories, LEGACY],
    "health": [ping],
}


def test_the_declarations_of_a_representative_set_match_the_golden_file() -> None:
    _golden("representative.d.ts", declarations(NAMESPACES))


def test_rendering_is_deterministic_and_follows_the_order_given() -> None:
    first = declarations(NAMESPACES)
    assert declarations(NAMESPACES) == first
    reordered: dict[str, list[Tool[Any, Any]]] = {
        "health": [ping],
        "catalog": [categories, LEGACY],
        "weather": [readings, stats],
    }
    other = declarations(reordered)
    assert other != first
    assert other.index("declare const health") < other.index("declare const weather")


def test_the_declarations_type_check_and_a_program_against_them_does_too(tmp_path: Path) -> None:
    declarations = (GOLDEN / "representative.d.ts").read_text()
    good = """
const program = async () => {
  const rs = await weather.readings({ place: { name: "Oslo", lat: 59.9, lon: 10.7 }, window: { start: "2026-01-01" } });
  const warm = rs.filter((r) => r.value !== null && r.value > 10 && r.unit === "c");
  const tree = await catalog.categories({ root: { label: "all" } });
  const found = await catalog.legacy_search({ q: "x", "api-version": 2, point: [1, 2] });
  await health.ping();
  const s = await weather.stats({ values: [1], pair: ["a", 1], scores: { a: 1 } });
  return { warm: warm.length, labels: tree.children?.map((c) => c.label), hits: found.hits, s };
};
"""
    bad = """
const program = async () => {
  const rs = await weather.readings({ place: { name: "Oslo" }, window: { start: "2026" } });
  return rs[0].value.toFixed();
};
"""
    env = {**os.environ, "DENO_DIR": str(tmp_path / "deno"), "NO_COLOR": "1"}
    files = []
    for name, program in (("good", good), ("bad", bad)):
        source = tmp_path / f"{name}.ts"
        source.write_text(declarations + program + "export {};\n")
        files.append(str(source))
    done = subprocess.run(  # one checker run for both files: TypeScript's start-up is the cost
        [DENO, "check", "--no-config", "--no-remote", "--no-npm", *files],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    report = done.stdout + done.stderr
    assert done.returncode != 0
    assert "good.ts:" not in report, report  # no error located in the good program
    assert "Found 2 errors." in report, report  # exactly the two mistakes of the bad program
    assert "missing the following properties from type 'Place': lat, lon" in report
    assert "possibly 'null'" in report


# ---- what cannot be rendered is refused ---------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "path", "reason"),
    [
        ({"not": {"type": "null"}}, "$.properties.x", "'not' cannot be rendered as TypeScript"),
        ({"allOf": [{"type": "string"}]}, "$.properties.x", "'allOf' cannot be rendered"),
        ({"type": "string", "if": {}, "then": {}}, "$.properties.x", "'if' cannot be rendered"),
        (
            {"type": "object", "patternProperties": {"^a": {}}},
            "$.properties.x",
            "'patternProperties' cannot be rendered",
        ),
        ({"enum": [{"a": 1}]}, "$.properties.x", "'enum' holds an object or array"),
        ({"properties": {"a": {}}}, "$.properties.x", "'properties' without 'type' 'object'"),
        ({"minimum": 1}, "$.properties.x", "'minimum' applies to integer/number"),
        ({"type": "string", "minItems": 1}, "$.properties.x", "'minItems' applies to array"),
        ({"$ref": "#/$defs/D", "maxLength": 3}, "$.properties.x", "'$ref' beside 'maxLength'"),
        ({"anyOf": [{}], "type": "string"}, "$.properties.x", "'anyOf' beside 'type'"),
        ({"type": "array", "items": {"nullable": True}}, "$.properties.x.items", "'nullable'"),
        ({"type": "object", "$defs": {}}, "$.properties.x", "only understood at the root"),
        ({"enum": ["a", 1], "type": "string"}, "$.properties.x", "value 1 is not of its 'type'"),
    ],
)
def test_a_construct_without_a_faithful_rendering_is_refused_with_its_path(
    schema: dict[str, Any], path: str, reason: str
) -> None:
    parameters = {
        "type": "object",
        "properties": {"x": schema},
        "$defs": {"D": {"type": "string"}},
    }
    search = Tool.dynamic("search", "Search.", parameters, readonly=True)
    with pytest.raises(UnrenderableSchema) as caught:
        declarations({"s": [search]})
    assert (caught.value.tool, caught.value.part, caught.value.path) == (
        "search",
        "parameters",
        path,
    )
    assert reason in str(caught.value)


@pytest.mark.parametrize("reference", ["https://example.com/s.json", "#/$defs/Missing"])
def test_a_reference_outside_the_schema_is_refused_before_a_declaration_is_made(
    reference: str,
) -> None:
    # Such a tool is never made (Tool.dynamic refuses it), so no declaration has to render it.
    parameters = {"type": "object", "properties": {"x": {"$ref": reference}}, "$defs": {}}
    with pytest.raises(ValueError, match="refers to"):
        Tool.dynamic("search", "Search.", parameters, readonly=True)


def test_a_schema_nested_deeper_than_the_renderer_goes_is_refused() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(70):
        schema = {"type": "array", "items": schema}
    deep = Tool.dynamic(
        "deep", "Deep.", {"type": "object", "properties": {"x": schema}}, readonly=True
    )
    with pytest.raises(UnrenderableSchema, match="nest deeper than 64 levels"):
        declarations({"s": [deep]})


# ---- everything our own schema deriver produces renders -----------------------------------------

SCALARS = st.sampled_from([str, int, float, bool, type(None), Any, Literal["a", "b"], Unit])


def _types(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda t: list[t], leaf),  # type: ignore[valid-type]
        st.builds(lambda t: dict[str, t], leaf),  # type: ignore[valid-type]
        st.builds(lambda t: tuple[t, ...], leaf),  # type: ignore[valid-type]
        st.builds(lambda a, b: tuple[a, b], leaf, leaf),  # type: ignore[valid-type]
        st.builds(lambda t: t | None, leaf),
        st.builds(lambda a, b: a | b, leaf, leaf),
        st.builds(lambda t: frozenset[t], st.sampled_from([str, int])),  # type: ignore[valid-type]
    )


TYPES = st.recursive(
    SCALARS | st.sampled_from([Place, Reading, Node, Window]), _types, max_leaves=6
)


@given(TYPES, TYPES)
def test_every_type_the_schema_layer_derives_renders_deterministically(
    parameter: Any, success: Any
) -> None:
    parameters = attrs.make_class("Drawn", {"x": attrs.field(type=parameter)})
    made: Tool[Any, Any] = Tool(
        "made", "A tool of drawn types.", parameters=parameters, success=success, readonly=True
    )
    first = declarations({"t": [made]})
    assert declarations({"t": [made]}) == first
    assert re.search(r"\bany\b", first) is None  # never widened to `any`

"""The partial JSON parser (``engine._partial_json``): for every JSON document and every cut point,
the value of the prefix is a prefix-consistent view of the final value."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from effectagent.engine._partial_json import INCOMPLETE, UNPARSABLE, parse_partial

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
_documents = st.dictionaries(st.text(max_size=6), _values, max_size=5) | st.lists(
    _values, max_size=4
)


def consistent(partial: Any, final: Any) -> bool:
    """``partial`` is a prefix-consistent view of ``final``: every completed member equals the
    final one; the last member (the one arriving) is a consistent view in turn."""
    if isinstance(final, dict):
        if not isinstance(partial, dict):
            return False
        keys = list(partial)
        if keys != list(final)[: len(keys)]:
            return False
        *done, last = keys or [None]
        if any(partial[key] != final[key] for key in done):
            return False
        return last is None or consistent(partial[last], final[last])
    if isinstance(final, list):
        if not isinstance(partial, list) or len(partial) > len(final):
            return False
        if not partial:
            return True
        if partial[:-1] != final[: len(partial) - 1]:
            return False
        return consistent(partial[-1], final[len(partial) - 1])
    if isinstance(final, str):
        return isinstance(partial, str) and final.startswith(partial)
    return partial == final and type(partial) is type(final)


@given(_documents, st.sampled_from([None, 2]), st.booleans())
def test_every_cut_is_prefix_consistent(document: Any, indent: int | None, ascii: bool) -> None:
    text = json.dumps(document, indent=indent, ensure_ascii=ascii)
    final = json.loads(text)  # floats as JSON reads them back
    for cut in range(len(text) + 1):
        partial = parse_partial(text[:cut])
        assert partial is not UNPARSABLE, text[:cut]
        if partial is INCOMPLETE:
            assert not text[:cut].strip()
            continue
        assert consistent(partial, final), (text[:cut], partial)
    assert parse_partial(text) == final


@given(_documents)
def test_completed_members_are_kept_as_they_grow(document: Any) -> None:
    """Once a member is complete, every longer prefix has it, equal: partial values only grow."""
    text = json.dumps(document)
    previous: Any = INCOMPLETE
    for cut in range(len(text) + 1):
        partial = parse_partial(text[:cut])
        if previous is not INCOMPLETE and isinstance(previous, dict):
            *done, _ = list(previous) or [None]
            assert all(partial[key] == previous[key] for key in done)
        previous = partial


def test_what_a_cut_gives() -> None:
    assert parse_partial("") is INCOMPLETE
    assert parse_partial('{"name": "Ad') == {"name": "Ad"}
    assert parse_partial('{"name": "Ada", "age": 3') == {"name": "Ada"}  # 3 may be 36
    assert parse_partial('{"name": "Ada", "age": 36,') == {"name": "Ada", "age": 36}
    assert parse_partial('{"name": "A\\u00') == {"name": "A"}  # an escape cut in the middle
    assert parse_partial('{"na') == {}
    assert parse_partial('{"ok": tr') == {}
    assert parse_partial('{"tags": ["a", "b') == {"tags": ["a", "b"]}
    assert parse_partial('{"x": {"y": [1, {"z": nul') == {"x": {"y": [1, {}]}}


def test_what_is_not_json_is_unparsable() -> None:
    for text in ('{"a": x', "{a", '{"a" 1', "[1 2", '{"a": 1} trailing', "[01", '"\\x', "{" * 70):
        assert parse_partial(text) is UNPARSABLE, text

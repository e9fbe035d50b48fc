"""fast_init: a cheaper ``__init__`` for frozen, slotted attrs classes that must behave exactly as
attrs' own — same parameters, defaults and factories, same values, still frozen — and refuses any
class it could not reproduce exactly.

Every class the engine decorates is checked too: whatever each field is given (positionally or by
keyword), the instance holds exactly that, and defaults and factories give what attrs would.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.effect._attrs_init import fast_init

ENGINE_MODULES = [
    "effectagent.ai._prompt",
    "effectagent.ai._model",
    "effectagent.ai._reduce",
    "effectagent.ai._tool",
    "effectagent.core._events",
    "effectagent.core._records",
    "effectagent.core._outcomes",
    "effectagent.core._usage",
    "effectagent.engine._handover",
]


def _plain_and_fast(**fields: Any) -> tuple[type, type]:
    plain = attrs.make_class("Sample", dict(fields), frozen=True, slots=True)
    fast = fast_init(attrs.make_class("Sample", dict(fields), frozen=True, slots=True))
    return plain, fast


_values = st.one_of(st.integers(), st.text(max_size=5), st.none(), st.lists(st.integers()))


@given(a=_values, b=_values, c=_values, give_c=st.booleans(), by_keyword=st.booleans())
def test_the_same_values_as_attrs_own_init(
    a: Any, b: Any, c: Any, give_c: bool, by_keyword: bool
) -> None:
    plain, fast = _plain_and_fast(
        a=attrs.field(), b=attrs.field(default="B"), c=attrs.field(factory=list)
    )
    args: tuple[Any, ...] = (a, b, c) if give_c else (a, b)
    kwargs = dict(zip("abc", args, strict=False))
    made = fast(**kwargs) if by_keyword else fast(*args)
    expected = plain(**kwargs) if by_keyword else plain(*args)
    assert attrs.asdict(made) == attrs.asdict(expected)
    assert repr(made).removeprefix("Sample") == repr(expected).removeprefix("Sample")
    assert made == fast(*args)


def test_defaults_are_the_same_object_and_factories_run_per_instance() -> None:
    shared: list[int] = []
    _, fast = _plain_and_fast(a=attrs.field(default=shared), b=attrs.field(factory=list))
    first, second = fast(), fast()
    assert first.a is shared
    assert second.a is shared
    assert first.b == []
    assert first.b is not second.b


def test_the_instance_stays_frozen_and_evolves_and_pickles() -> None:
    made = fast_init(Point)(1, 2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.x = 3  # type: ignore[misc]
    assert attrs.evolve(made, y=5) == Point(1, 5)
    assert pickle.loads(pickle.dumps(made)) == made


@attrs.frozen(slots=True)
class Point:
    x: int
    y: int = 0


@attrs.frozen(slots=True)
class Point3(Point):
    z: int = 9


def test_inherited_slots_are_set_too() -> None:
    made = fast_init(Point3)(1, 2, 3)
    assert (made.x, made.y, made.z) == (1, 2, 3)
    assert fast_init(Point3)(1) == Point3(1, 0, 9)


def test_missing_and_unknown_arguments_fail_as_a_call_would() -> None:
    _, fast = _plain_and_fast(a=attrs.field())
    with pytest.raises(TypeError):
        fast()
    with pytest.raises(TypeError):
        fast(1, 2)
    with pytest.raises(TypeError):
        fast(b=1)


def test_the_signature_is_attrs_own() -> None:
    plain, fast = _plain_and_fast(a=attrs.field(), b=attrs.field(default=3))
    assert str(inspect.signature(fast)) == str(inspect.signature(plain))


@pytest.mark.parametrize(
    ("fields", "frozen", "slots", "message"),
    [
        ({"a": attrs.field(validator=attrs.validators.instance_of(int))}, True, True, "field"),
        ({"a": attrs.field(converter=int)}, True, True, "field"),
        ({"a": attrs.field(kw_only=True)}, True, True, "field"),
        ({"a": attrs.field(init=False, default=1)}, True, True, "field"),
        ({"_a": attrs.field()}, True, True, "field"),  # alias "a"
        (
            {"a": attrs.field(default=attrs.Factory(lambda self: 1, takes_self=True))},
            True,
            True,
            "factory",
        ),
        ({"a": attrs.field()}, False, True, "not frozen"),
        ({"a": attrs.field()}, True, False, "slotted"),
    ],
)
def test_classes_it_cannot_reproduce_are_refused(
    fields: dict[str, Any], frozen: bool, slots: bool, message: str
) -> None:
    cls = attrs.make_class("Odd", fields, frozen=frozen, slots=slots)
    with pytest.raises(TypeError, match=message):
        fast_init(cls)


def test_a_post_init_is_refused() -> None:
    @attrs.frozen(slots=True)
    class Checked:
        a: int

        def __attrs_post_init__(self) -> None:
            pass

    with pytest.raises(TypeError, match="__attrs_post_init__"):
        fast_init(Checked)


def _decorated_classes() -> list[type]:
    found = []
    for name in ENGINE_MODULES:
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and obj.__module__ == name
                and attrs.has(obj)
                and obj.__init__.__code__.co_filename.startswith("<fast_init")
            ):
                found.append(obj)
    return found


DECORATED = _decorated_classes()


def test_the_engines_value_classes_are_decorated() -> None:
    names = {cls.__name__ for cls in DECORATED}
    # The ones made on every step or call, at least.
    assert {"TextDelta", "ToolCallSucceeded", "ToolCallSettled", "ToolSuccess", "UsageTotals"} <= (
        names
    )
    assert {
        "ModelRequest",
        "ToolResultContent",
        "RunResult",
        "ModelResponse",
        "ToolCallContext",
    } <= (names)


@pytest.mark.parametrize("cls", DECORATED, ids=lambda cls: cls.__qualname__)
def test_each_decorated_class_holds_what_it_is_given(cls: type) -> None:
    fields = attrs.fields(cls)
    given_values = {f.name: object() for f in fields}
    by_position = cls(*given_values.values())
    by_keyword = cls(**given_values)
    for made in (by_position, by_keyword):
        assert {f.name: getattr(made, f.name) for f in fields} == given_values
    required = {f.name: given_values[f.name] for f in fields if f.default is attrs.NOTHING}
    with_defaults = cls(**required)
    for f in fields:
        if f.default is attrs.NOTHING:
            continue
        expected = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[arg-type]
        assert getattr(with_defaults, f.name) == expected
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(by_position, fields[0].name, None)

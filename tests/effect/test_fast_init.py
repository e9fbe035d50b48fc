"""fast_init: a cheaper ``__init__`` for frozen, slotted attrs classes that must behave exactly as
attrs' own — same signature (keyword-only fields after a ``*``), defaults and factories, same
values, still frozen — and refuses any class it could not reproduce exactly.

A property over generated classes (positional and keyword-only fields, on the class or the field,
inherited or not, with and without defaults and factories) proves that the generated ``__init__``
and attrs' own accept and refuse exactly the same calls, with the same values and messages.

Every class the engine decorates is checked too: whatever each field is given (positionally or by
keyword, as its signature allows), the instance holds exactly that, and defaults and factories give
what attrs would.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
from typing import Any

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from effectagent.effect._attrs_init import _INSTALLED, fast_init

ENGINE_MODULES = [
    "effectagent.ai._prompt",
    "effectagent.ai._model",
    "effectagent.ai._reduce",
    "effectagent.ai._tool",
    "effectagent.ai._context",
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


def test_keyword_only_fields_follow_a_star_as_in_attrs_own_signature() -> None:
    plain, fast = _plain_and_fast(
        a=attrs.field(),
        b=attrs.field(default=1),
        c=attrs.field(kw_only=True),
        d=attrs.field(kw_only=True, factory=list),
        e=attrs.field(kw_only=True),
    )
    assert str(inspect.signature(fast)) == "(a, b=1, *, c, d=NOTHING, e) -> None"
    assert inspect.signature(fast) == inspect.signature(plain)
    made = fast(1, c=3, e=5)
    assert (made.a, made.b, made.c, made.d, made.e) == (1, 1, 3, [], 5)
    with pytest.raises(TypeError, match="positional"):
        fast(1, 2, 3, e=5)  # c given by position
    with pytest.raises(TypeError, match="keyword-only argument: 'c'"):
        fast(1, e=5)


@attrs.frozen(slots=True, kw_only=True)
class Header:
    run: str
    seq: int


@attrs.frozen(slots=True, kw_only=True)
class Started(Header):
    turn: int
    grace: bool = False


def test_a_keyword_only_class_and_its_keyword_only_base() -> None:
    """attrs' class-level ``kw_only`` covers the class's own fields; the base's are keyword-only
    because the base says so too."""
    own_init = Started.__init__
    fast = fast_init(Started)
    params = inspect.signature(fast).parameters.values()
    assert [(p.name, p.kind, p.default) for p in params] == [
        ("run", inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty),
        ("seq", inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty),
        ("turn", inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty),
        ("grace", inspect.Parameter.KEYWORD_ONLY, False),
    ]
    assert inspect.signature(fast.__init__) == inspect.signature(own_init)
    made = fast(run="r", seq=1, turn=3)
    assert (made.run, made.seq, made.turn, made.grace) == ("r", 1, 3, False)
    with pytest.raises(TypeError, match="positional"):
        fast("r", 1, 3)  # type: ignore[call-arg]


# ---- the property: generated and attrs' own __init__ accept and refuse the same calls --------------

#: How a generated field is declared: keyword-only or not, and its default (none, a value, a factory).
_FIELD = st.tuples(st.booleans(), st.sampled_from(["required", "value", "factory"]))


def _declare(kw_only: bool, default: str, name: str) -> Any:
    if default == "value":
        return attrs.field(kw_only=kw_only, default=f"default of {name}")
    if default == "factory":
        return attrs.field(kw_only=kw_only, factory=lambda: [name])
    return attrs.field(kw_only=kw_only)


def _make(
    name: str, fields: list[tuple[bool, str]], prefix: str, kw_only: bool, base: type
) -> type:
    declared = {f"{prefix}{i}": _declare(k, d, f"{prefix}{i}") for i, (k, d) in enumerate(fields)}
    return attrs.make_class(name, declared, bases=(base,), frozen=True, slots=True, kw_only=kw_only)


def _outcome(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What a call does: the values it stores, or the TypeError's message (both classes are
    named ``Sample``, so their messages compare as they are)."""
    try:
        made = cls(*args, **kwargs)
    except TypeError as exc:
        return ("refused", str(exc))
    return ("made", tuple(getattr(made, f.name) for f in attrs.fields(cls)))


@given(
    data=st.data(),
    base_fields=st.lists(_FIELD, max_size=3),
    base_kw_only=st.booleans(),
    own_fields=st.lists(_FIELD, max_size=4),
    own_kw_only=st.booleans(),
)
def test_generated_and_attrs_own_init_accept_and_refuse_the_same_calls(
    data: st.DataObject,
    base_fields: list[tuple[bool, str]],
    base_kw_only: bool,
    own_fields: list[tuple[bool, str]],
    own_kw_only: bool,
) -> None:
    """For all classes of plain, defaulted and factory fields, each keyword-only or not (on the
    field or the class, its own or its base's), and all calls — any number of positional
    arguments, any keywords, unknown ones and ones also given by position included — attrs' own
    ``__init__`` and the generated one store the same values or raise the same TypeError."""
    try:
        made = {}
        for kind in ("plain", "fast"):
            base = _make("Base", base_fields, "b", base_kw_only, object)
            made[kind] = _make("Sample", own_fields, "f", own_kw_only, base)
    except ValueError:  # attrs' own refusal: a required positional field after a defaulted one
        assume(False)
    plain, fast = made["plain"], fast_init(made["fast"])
    assert inspect.signature(fast) == inspect.signature(plain)
    names = [f.name for f in attrs.fields(plain)]
    for _ in range(4):
        count = data.draw(st.integers(0, len(names) + 1), label="positional arguments")
        keywords = data.draw(
            st.lists(st.sampled_from([*names, "unknown"]), unique=True), label="keywords"
        )
        args = tuple(range(count))
        kwargs = {name: f"given {name}" for name in keywords}
        assert _outcome(fast, args, kwargs) == _outcome(plain, args, kwargs)


@pytest.mark.parametrize(
    ("fields", "frozen", "slots", "message"),
    [
        ({"a": attrs.field(validator=attrs.validators.instance_of(int))}, True, True, "field"),
        ({"a": attrs.field(converter=int)}, True, True, "field"),
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


def _attrs_own_init(cls: type) -> Any:
    """attrs' own ``__init__`` of a class fast_init decorated (it keeps it for ``attrs_inits``)."""
    return next(original for installed, original, _ in _INSTALLED if installed is cls)


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
    positional = [given_values[f.name] for f in fields if not f.kw_only]
    keywords = {f.name: given_values[f.name] for f in fields if f.kw_only}
    by_position = cls(*positional, **keywords)
    by_keyword = cls(**given_values)
    for made in (by_position, by_keyword):
        assert {f.name: getattr(made, f.name) for f in fields} == given_values
    assert inspect.signature(cls.__dict__["__init__"]) == inspect.signature(_attrs_own_init(cls))
    required = {f.name: given_values[f.name] for f in fields if f.default is attrs.NOTHING}
    with_defaults = cls(**required)
    for f in fields:
        if f.default is attrs.NOTHING:
            continue
        expected = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[arg-type]
        assert getattr(with_defaults, f.name) == expected
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(by_position, fields[0].name, None)

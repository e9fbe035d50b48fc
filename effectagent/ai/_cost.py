"""What model calls cost: prices per model, and the arithmetic, in integer micro-dollars. Pure.

A :class:`Price` gives US dollars per million tokens — for uncached input, cache reads
(``cached_input``), cache writes, output and reasoning — as exact decimals. A dollar per million
tokens is a micro-dollar per token, so a call's exact cost in micro-dollars is the sum of each
part's token count times its price; **the rounding rule**: a call's cost is that exact figure
rounded *up* to a whole micro-dollar (a call never costs less than what it used, and a call that
used anything at a non-zero price costs at least one micro-dollar), and a run's cost is the sum
of its calls' costs — so the per-call costs always add up to the run's, and the cost never falls
when any token count grows. The arithmetic is on integers: no float ever enters it.

A :class:`PriceTable` maps model strings (``"anthropic:claude-sonnet-4-5"``) to prices. A model
it does not name has no price — :meth:`PriceTable.price_of` says None, never a made-up zero.
The runtime looks prices up in the table its Layer provides as :data:`PricesService`, or, when it
provides none, in the shipped :data:`~effectagent.ai.DEFAULT_PRICES`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any, Final

import attrs

from effectagent.effect import ServiceKey

from ._usage import Usage

__all__ = [
    "MICROS_PER_DOLLAR",
    "NoPriceForModel",
    "Price",
    "PriceTable",
    "PricesService",
    "dollars",
    "model_name_of",
]

#: Micro-dollars in a dollar: the unit every cost is counted in.
MICROS_PER_DOLLAR: Final = 1_000_000

#: Model-string prefixes that name the same models as another prefix (the table's keys use the
#: second): OpenAI's two APIs price the same model alike, and Gemini has two prefixes.
_SAME_MODELS: Final = MappingProxyType(
    {"openai-responses": "openai", "openai-chat": "openai", "gemini": "google"}
)

#: A dated snapshot's suffix (``-20250929``, ``-2025-04-14``): priced as the model it snapshots.
_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


def _decimal(value: object) -> Decimal:
    """An exact decimal from a Decimal, int, str or float (a float by its shortest repr, so
    ``0.3`` is 0.3, not the binary fraction nearest it)."""
    if isinstance(value, bool):
        raise TypeError(f"a price is a number of dollars, got {value!r}")
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, str):
        try:
            return Decimal(value.strip())
        except InvalidOperation:
            raise ValueError(f"a price is a number of dollars, got {value!r}") from None
    raise TypeError(f"a price is a number of dollars (a Decimal, int, str or float), got {value!r}")


def _optional_decimal(value: object) -> Decimal | None:
    return None if value is None else _decimal(value)


#: The most decimal places a price may have, and the largest power of ten it may reach: figures
#: past them mean nothing as dollars per million tokens, and exact integer arithmetic on them
#: would take unbounded time and memory (``Decimal("1e-999999999")``).
_MAX_PLACES: Final = 30
_MAX_MAGNITUDE: Final = 15


def _stripped(price: Decimal) -> tuple[int, int]:
    """``price`` (finite, at least 0) as ``(whole, exponent)``, ``whole * 10 ** exponent``, with
    no trailing zeros in ``whole`` (``1.500`` is ``(15, -1)``; zero is ``(0, 0)``)."""
    _, digits, exponent = price.as_tuple()
    assert isinstance(exponent, int)  # a finite Decimal
    significant = len(digits)
    while significant and digits[significant - 1] == 0:
        significant -= 1
    if not significant:
        return 0, 0
    return int("".join(map(str, digits[:significant]))), exponent + len(digits) - significant


def _places(price: Decimal) -> int:
    """The decimal places of ``price``, its trailing zeros not counted (``1.500`` has one)."""
    return max(0, -_stripped(price)[1])


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    assert isinstance(value, Decimal)
    if not value.is_finite() or value < 0:
        raise ValueError(
            f"Price.{attribute.name} must be a finite number of dollars of at least 0, got {value}"
        )
    if _places(value) > _MAX_PLACES or (value and value.adjusted() > _MAX_MAGNITUDE):
        raise ValueError(
            f"Price.{attribute.name} must be under 1E+{_MAX_MAGNITUDE + 1} dollars per million "
            f"tokens, with at most {_MAX_PLACES} decimal places, got {value}"
        )


def _scaled(price: Decimal, places: int) -> int:
    """``price`` times ``10 ** places`` (at least its own places), an integer — exactly
    (``Decimal.scaleb`` would round to the context's 28 digits)."""
    whole, exponent = _stripped(price)
    scaled: int = whole * 10 ** (exponent + places)
    return scaled


@attrs.frozen
class Price:
    """What a model charges, in US dollars per million tokens, as exact decimals (a ``str``,
    ``int`` or ``Decimal``; a ``float`` is taken by its shortest repr).

    ``input`` is uncached input and ``output`` output text; ``cached_input`` (cache reads),
    ``cache_write`` (input written to the cache) default to ``input``, ``reasoning`` to
    ``output``; ``cache_write_long`` (input written to the cache for a long lifetime: Anthropic's
    one-hour entries) to twice ``input``, what Anthropic charges for them. Negative or non-finite figures are refused, naming the field, and so are figures
    no price means — 1E+16 dollars or more, or more than 30 decimal places."""

    input: Decimal = attrs.field(converter=_decimal, validator=_non_negative)
    output: Decimal = attrs.field(converter=_decimal, validator=_non_negative)
    cached_input: Decimal | None = attrs.field(
        default=None, converter=_optional_decimal, validator=_non_negative, kw_only=True
    )
    cache_write: Decimal | None = attrs.field(
        default=None, converter=_optional_decimal, validator=_non_negative, kw_only=True
    )
    reasoning: Decimal | None = attrs.field(
        default=None, converter=_optional_decimal, validator=_non_negative, kw_only=True
    )
    cache_write_long: Decimal | None = attrs.field(
        default=None, converter=_optional_decimal, validator=_non_negative, kw_only=True
    )
    # The six prices as integers over one power of ten (exact integer arithmetic).
    _scaled: tuple[int, ...] = attrs.field(init=False, repr=False, eq=False)
    _scale: int = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        prices = (
            self.input,
            self.input if self.cached_input is None else self.cached_input,
            self.input if self.cache_write is None else self.cache_write,
            self.output,
            self.output if self.reasoning is None else self.reasoning,
            2 * self.input if self.cache_write_long is None else self.cache_write_long,
        )
        places = max(0, *(_places(price) for price in prices))
        scale = 10**places
        scaled = tuple(_scaled(price, places) for price in prices)
        object.__setattr__(self, "_scaled", scaled)
        object.__setattr__(self, "_scale", scale)

    def cost(
        self,
        *,
        uncached_input: int = 0,
        cache_read: int = 0,
        cache_write: int = 0,
        output: int = 0,
        reasoning: int = 0,
        cache_write_long: int = 0,
    ) -> int:
        """What one call that used these tokens costs, in micro-dollars — each part counted
        apart (``output`` is output *other than* reasoning; ``cache_write_long`` is the part of
        ``cache_write`` priced at ``cache_write_long``), rounded up to a whole micro-dollar (see
        the module notes). Negative counts, and long writes beyond the writes, are refused."""
        counts = (
            uncached_input,
            cache_read,
            cache_write - cache_write_long,
            output,
            reasoning,
            cache_write_long,
        )
        if min(counts) < 0:
            raise ValueError(
                "token counts are never negative, and cache_write_long is part of cache_write: "
                f"got {(uncached_input, cache_read, cache_write, output, reasoning)} and "
                f"cache_write_long={cache_write_long}"
            )
        exact = sum(count * price for count, price in zip(counts, self._scaled, strict=True))
        return -(-exact // self._scale)  # the ceiling, in integers

    def cost_of(self, usage: Usage) -> int:
        """What one call that reported ``usage`` costs, in micro-dollars. A provider that
        reported only totals has its uncached input derived from them (the total less the cache
        reads and writes), and its output text (the output less the reasoning)."""
        return self.cost_of_counts(
            usage.input.total,
            usage.output.total,
            usage.input.cache_read,
            usage.input.cache_write,
            usage.output.reasoning,
            usage.input.cache_write_long,
        )

    def cost_of_counts(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_read: int = 0,
        cache_write: int = 0,
        reasoning: int = 0,
        cache_write_long: int = 0,
    ) -> int:
        """As :meth:`cost_of`, from the totals one call reported: ``input_tokens`` includes
        the cache reads and writes, ``output_tokens`` the reasoning, ``cache_write`` the long
        writes."""
        return self.cost(
            uncached_input=max(0, input_tokens - cache_read - cache_write),
            cache_read=cache_read,
            cache_write=cache_write,
            output=max(0, output_tokens - reasoning),
            reasoning=reasoning,
            cache_write_long=cache_write_long,
        )


def _read_only(prices: Mapping[str, Price]) -> Mapping[str, Price]:
    return MappingProxyType(dict(prices))


def _keys(model: str) -> Iterator[str]:
    """The keys a model string is looked up under, in order: itself, its prefix's canonical
    spelling (``openai-chat:`` → ``openai:``), and both without a snapshot's date."""
    yield model
    prefix, colon, name = model.partition(":")
    canonical = f"{_SAME_MODELS.get(prefix.lower(), prefix.lower())}:{name}" if colon else model
    if canonical != model:
        yield canonical
    undated = _SNAPSHOT.sub("", canonical)
    if undated != canonical:
        yield undated


@attrs.frozen
class PriceTable:
    """Prices by model string (``"anthropic:claude-sonnet-4-5"``, ``"openai:gpt-4.1"``); ``taken``
    says when the figures were taken (they change: a table is its user's to check).

    A model string is found as written, then with its prefix spelled as the table spells it
    (``openai-chat:`` and ``openai-responses:`` as ``openai:``, ``gemini:`` as ``google:``),
    then without a dated snapshot's suffix (``-20250929``) — each as written, then regardless
    of case (``openai:GPT-4o`` is priced as ``openai:gpt-4o``). ``openai-compatible:`` models are
    never priced by OpenAI's figures: a server of your own charges what you say it does."""

    prices: Mapping[str, Price] = attrs.field(factory=dict, converter=_read_only)
    taken: str | None = None
    # The prices by case-folded model string; a string two entries fold to is left out (which
    # of them it means is not known).
    _folded: Mapping[str, Price] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        entries: Iterable[tuple[object, object]] = self.prices.items()
        folded: dict[str, Price | None] = {}
        for model, price in entries:
            if not (isinstance(model, str) and isinstance(price, Price)):
                raise TypeError(
                    f"a price table maps model strings to Prices, got {model!r}: {price!r}"
                )
            key = model.casefold()
            folded[key] = price if key not in folded else None
        kept = {key: price for key, price in folded.items() if price is not None}
        object.__setattr__(self, "_folded", MappingProxyType(kept))

    def price_of(self, model: str | None) -> Price | None:
        """The price of ``model``, or None when the table has none (never a made-up zero).
        Looked up as written first, then regardless of case (``openai:GPT-4o`` is the table's
        ``openai:gpt-4o``)."""
        if model is None:
            return None
        for prices in (self.prices, self._folded):
            for key in _keys(model):
                price = prices.get(key if prices is self.prices else key.casefold())
                if price is not None:
                    return price
        return None

    def price_for(self, model: object, answered: str | None = None) -> Price | None:
        """The price of a call ``model`` answered. For a routing model (a
        :class:`~effectagent.ai.FallbackModel`), ``answered`` names the member that answered:
        that member's own model string (:func:`model_name_of`) when the table has it — a member
        may be named by a ``ModelKey`` (``"backup"``) that no table prices — else ``answered``
        itself; else ``model``'s own name."""
        if answered is not None:
            member = _member_named(model, answered)
            price = None if member is None else self.price_of(model_name_of(member))
            if price is None:
                price = self.price_of(answered)
            if price is not None:
                return price
        return self.price_of(model_name_of(model))

    def with_prices(self, prices: Mapping[str, Price], *, taken: str | None = None) -> PriceTable:
        """This table with ``prices`` added (over any it has for the same model strings)."""
        return PriceTable({**self.prices, **prices}, taken if taken is not None else self.taken)


class NoPriceForModel(ValueError):
    """An agent has a cost budget, but the model it runs on has no price: a limit that cannot
    be enforced is refused before the run starts, not ignored."""

    def __init__(self, agent: str, model: str | None, budget_micros: int) -> None:
        self.agent = agent
        self.model = model
        self.budget_micros = budget_micros
        named = f"the model {model!r}" if model is not None else "its model, which has no name,"
        super().__init__(
            f"the agent {agent!r} has a cost budget of {dollars(budget_micros)}, but {named} "
            "has no price in the runtime's price table: give it one (PricesService) or drop "
            "the cost budget"
        )


def dollars(micros: int) -> str:
    """``micros`` micro-dollars as a person reads them: ``$0.0042`` under a dollar (four
    decimals; ``<$0.0001`` for less than that, never a made-up ``$0.0000``), ``$12.35`` above;
    a negative amount (what is left of a budget that was passed) as its opposite with a minus
    sign before it: ``-$0.0042``."""
    if micros < 0:
        return f"-{dollars(-micros)}"
    if 0 < micros < 100:
        return "<$0.0001"
    amount = Decimal(micros).scaleb(-6)
    shown = f"{amount:.4f}"
    if micros < MICROS_PER_DOLLAR and shown != "1.0000":  # $0.99995 and up read as $1.00
        return f"${shown}"
    return f"${amount:,.2f}"


def _member_named(model: object, name: str) -> object | None:
    """The member of a routing model (its ``models``, named by its ``names``: a
    :class:`~effectagent.ai.FallbackModel`) that is called ``name`` — searched through members
    that route too, as a nested chain names the member of its own that answered — or None."""
    members, names = getattr(model, "models", None), getattr(model, "names", None)
    if not (isinstance(members, tuple) and isinstance(names, tuple)):
        return None
    for member, member_name in zip(members, names, strict=False):
        if member_name == name:
            found: object = member
            return found
    for member in members:
        found = _member_named(member, name)
        if found is not None:
            return found
    return None


def model_name_of(model: object) -> str | None:
    """The model string a model adapter names itself by (its ``model_name``: the providers'
    adapters have one), or None for one that does not."""
    name = getattr(model, "model_name", None)
    return name if isinstance(name, str) else None


#: The price table the runtime uses (absent: :data:`~effectagent.ai.DEFAULT_PRICES`).
PricesService: ServiceKey[PriceTable] = ServiceKey(
    "effectagent.Prices", "the price table model calls are costed with"
)

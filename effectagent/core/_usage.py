"""Usage accounting across a run (CAP-017): cache-aware and context-aware. Pure values."""

from __future__ import annotations

import attrs

from effectagent.ai import Price, Usage
from effectagent.effect import _fast_init

__all__ = ["UsageDelta", "UsageTotals"]


@_fast_init
@attrs.frozen(slots=True)
class UsageDelta:
    """What one model call added. ``input_tokens`` is the total input (cached or not).

    ``cost_micros`` is what the call cost, in micro-dollars, at its model's price (see
    :class:`~effectagent.ai.Price` for the rounding); None when its model has no price — never a
    made-up zero."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    reasoning_tokens: int = 0
    cost_micros: int | None = None

    @staticmethod
    def from_usage(usage: Usage, price: Price | None = None) -> UsageDelta:
        """The delta of one call's reported usage, costed at ``price`` (None: no price)."""
        # Positional, in field order (a keyword call costs a third more here, once per turn).
        inp, out = usage.input, usage.output
        return UsageDelta(
            inp.total,
            out.total,
            inp.cache_read,
            inp.cache_write,
            out.reasoning,
            None if price is None else price.cost_of(usage),
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output."""
        return self.input_tokens + self.output_tokens


@_fast_init
@attrs.frozen(slots=True)
class UsageTotals:
    """Running totals. ``last_input_tokens``/``last_output_tokens`` are the most recent turn's
    model call's — the live-context estimate (the next request holds at least that much). A call
    made beside the conversation (a guardrail's or validator's ``ctx.generate``, a compaction's
    summary) had a context of its own: it is counted in every other figure, not in these.

    ``cost_micros`` is what the priced calls cost, in micro-dollars (the sum of each call's
    cost), and ``unpriced_calls`` how many calls had no price: :attr:`cost` is the whole cost
    only when every call had one."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    reasoning_tokens: int = 0
    model_calls: int = 0
    last_input_tokens: int = 0
    last_output_tokens: int = 0
    cost_micros: int = 0
    unpriced_calls: int = 0
    #: The totals of each model's calls (:meth:`add_from`), by the name the records give it
    #: (None: the runtime's own model); a child run's are merged in. A
    #: breakdown of the figures above, so not compared: totals are equal when their figures are.
    by_model: tuple[tuple[str | None, UsageTotals], ...] = attrs.field(default=(), eq=False)

    def add_from(self, model: str | None, delta: UsageDelta, *, live: bool = True) -> UsageTotals:
        """Totals after one more call, made by ``model``: counted by model too (``live`` as for
        :meth:`add`)."""
        totals = self.add(delta, live=live)
        by_model = self.by_model
        for index, (name, each) in enumerate(by_model):
            if name == model:
                merged = (
                    *by_model[:index],
                    (name, each.add(delta, live=live)),
                    *by_model[index + 1 :],
                )
                break
        else:
            merged = (*by_model, (model, _NO_TOTALS.add(delta, live=live)))
        object.__setattr__(totals, "by_model", merged)  # the new value has not escaped yet
        return totals

    def attributed_to(self, model: str | None) -> UsageTotals:
        """These totals, every call of them made by ``model``: the same figures, broken down as
        that one model's. For totals without a breakdown of their own (raises ValueError)."""
        if self.by_model:
            raise ValueError("these totals already have a breakdown by model")
        return UsageTotals(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_input_tokens,
            self.cache_write_input_tokens,
            self.reasoning_tokens,
            self.model_calls,
            self.last_input_tokens,
            self.last_output_tokens,
            self.cost_micros,
            self.unpriced_calls,
            ((model, self),),
        )

    def add(self, delta: UsageDelta, *, live: bool = True) -> UsageTotals:
        """Totals after one more call. ``live=False`` for a call made beside the conversation (a
        check's, a summary's): counted like any, but the live-context figures (``last_*``) stay
        the last turn's — its context was not the conversation's."""
        # Positional, in field order: input, output, cache read, cache write, reasoning, model
        # calls, last input, last output, cost, unpriced calls.
        cost = delta.cost_micros
        return UsageTotals(
            self.input_tokens + delta.input_tokens,
            self.output_tokens + delta.output_tokens,
            self.cache_read_input_tokens + delta.cache_read_input_tokens,
            self.cache_write_input_tokens + delta.cache_write_input_tokens,
            self.reasoning_tokens + delta.reasoning_tokens,
            self.model_calls + 1,
            delta.input_tokens if live else self.last_input_tokens,
            delta.output_tokens if live else self.last_output_tokens,
            self.cost_micros if cost is None else self.cost_micros + cost,
            self.unpriced_calls + 1 if cost is None else self.unpriced_calls,
            self.by_model,
        )

    def including(self, other: UsageTotals) -> UsageTotals:
        """These totals with ``other``'s (a child run's) added in. The live-context figures
        (``last_*``) stay these: a child's calls were made in its own context, not this one."""
        return UsageTotals(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_write_input_tokens + other.cache_write_input_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.model_calls + other.model_calls,
            self.last_input_tokens,
            self.last_output_tokens,
            self.cost_micros + other.cost_micros,
            self.unpriced_calls + other.unpriced_calls,
            _merged(self.by_model, other.by_model) if other.by_model else self.by_model,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output over the run."""
        return self.input_tokens + self.output_tokens

    @property
    def cost(self) -> int | None:
        """What the calls cost, in micro-dollars — None when a call had no price (the priced
        calls' part is :attr:`cost_micros`)."""
        return None if self.unpriced_calls else self.cost_micros

    @property
    def live_context_tokens(self) -> int:
        """Estimate of the context now: last call's input plus its output."""
        return self.last_input_tokens + self.last_output_tokens


_NO_TOTALS = UsageTotals()


def _merged(
    ours: tuple[tuple[str | None, UsageTotals], ...],
    theirs: tuple[tuple[str | None, UsageTotals], ...],
) -> tuple[tuple[str | None, UsageTotals], ...]:
    """Per-model totals of two runs together (ours first, then the models only theirs used)."""
    merged = dict(ours)
    for name, totals in theirs:
        mine = merged.get(name)
        merged[name] = totals if mine is None else mine.including(totals)
    return tuple(merged.items())

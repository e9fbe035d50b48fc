"""AgentPolicy and the agent definition. Bad values fail at construction with a clear message."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from effectagent.ai import Toolkit

__all__ = ["Agent", "AgentPolicy", "CompactionPolicy", "RetryPolicy", "ToolResultBounds"]

MIN_RESULT_BYTES = 256


def _positive_int(name: str) -> Any:
    def check(_: object, __: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"AgentPolicy.{name} must be a positive integer, got {value!r}")

    return check


def _optional_positive_int(name: str) -> Any:
    def check(_: object, __: attrs.Attribute[Any], value: object) -> None:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(
                f"AgentPolicy.{name} must be a positive integer or None, got {value!r}"
            )

    return check


def _positive_number(name: str) -> Any:
    def check(_: object, __: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(
                f"AgentPolicy.{name} must be a positive number of seconds, got {value!r}"
            )

    return check


@attrs.frozen
class ToolResultBounds:
    """How large a tool result may be in model context and records (RUN-022).

    Larger results become a truncation marker holding the original size, a head and a tail.
    """

    max_bytes: int = 50 * 1024
    head_bytes: int | None = None
    tail_bytes: int | None = None

    def __attrs_post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int):
            raise ValueError(  # noqa: TRY004 - every bad policy value is a ValueError
                f"ToolResultBounds.max_bytes must be an integer, got {self.max_bytes!r}"
            )
        if self.max_bytes < MIN_RESULT_BYTES:
            raise ValueError(
                f"ToolResultBounds.max_bytes must be at least {MIN_RESULT_BYTES}, got {self.max_bytes}"
            )
        for name in ("head_bytes", "tail_bytes"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValueError(f"ToolResultBounds.{name} must be a non-negative integer or None")


@attrs.frozen
class CompactionPolicy:
    """What a run asks of its Compactor when the context exceeds ``context_token_limit``.

    The engine only estimates the context and asks; the Compactor decides what to compact. It gets
    ``strategy`` — prune old tool results and then, if still too large, summarize
    (``"prune-then-summarize"``), or prune only — and ``keep_recent_tokens``, the most recent part
    of the conversation to leave as it is.
    """

    keep_recent_tokens: int = 20_000
    strategy: Literal["prune-then-summarize", "prune-only"] = "prune-then-summarize"

    def __attrs_post_init__(self) -> None:
        keep: object = self.keep_recent_tokens
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError("CompactionPolicy.keep_recent_tokens must be a non-negative integer")
        if self.strategy not in ("prune-then-summarize", "prune-only"):
            raise ValueError(f"unknown compaction strategy {self.strategy!r}")


@attrs.frozen
class RetryPolicy:
    """How a model call that failed with a retryable error (``AiError.is_retryable``) is retried.

    Up to ``attempts`` calls in all (1: no retry). The wait before retry *n* (1-based) is
    ``min(max_delay, initial_delay * multiplier ** (n - 1))``, scaled by a random factor in
    ``[1 - jitter, 1]``; a provider's ``retry_after`` is honoured when it is longer. No wait
    reaches past the run's deadline: a retry that cannot happen in time is not attempted.
    """

    attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __attrs_post_init__(self) -> None:
        attempts: object = self.attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be a positive integer, got {attempts!r}")
        for name in ("initial_delay", "max_delay", "multiplier"):
            value: object = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"RetryPolicy.{name} must be a positive number, got {value!r}")
        if self.multiplier < 1:
            raise ValueError(f"RetryPolicy.multiplier must be at least 1, got {self.multiplier!r}")
        jitter: object = self.jitter
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter < 1:
            raise ValueError(f"RetryPolicy.jitter must be in [0, 1), got {jitter!r}")


@attrs.frozen
class AgentPolicy:
    """Limits and behaviour of a run. The first four are required.

    ``on_exhaustion``: ``"final-answer"`` admits exactly one grace turn with tool choice ``"none"``
    when a budget runs out, and the run ends with finish reason ``"budget-exhausted"``; ``"fail"``
    ends the run with a failure naming the dimension.
    """

    max_turns: int = attrs.field(validator=_positive_int("max_turns"))
    max_tool_calls: int = attrs.field(validator=_positive_int("max_tool_calls"))
    max_duration: float = attrs.field(validator=_positive_number("max_duration"))
    tool_concurrency: int = attrs.field(validator=_positive_int("tool_concurrency"))
    repeated_failure_limit: int = attrs.field(
        default=3, validator=_positive_int("repeated_failure_limit")
    )
    on_exhaustion: Literal["final-answer", "fail"] = "final-answer"
    tool_result_bounds: ToolResultBounds = ToolResultBounds()
    compaction: CompactionPolicy = CompactionPolicy()
    token_budget: int | None = attrs.field(
        default=None, validator=_optional_positive_int("token_budget")
    )
    context_token_limit: int | None = attrs.field(
        default=None, validator=_optional_positive_int("context_token_limit")
    )
    approval_timeout: float = attrs.field(
        default=300.0, validator=_positive_number("approval_timeout")
    )
    grace_turn_duration: float = attrs.field(
        default=30.0, validator=_positive_number("grace_turn_duration")
    )
    #: How many times a final answer that does not decode into ``Agent.output`` goes back to the
    #: model with the decoder's message (each attempt is a turn, counted in the budgets).
    output_retries: int = attrs.field(default=2, validator=attrs.validators.ge(0))
    #: How a model call that failed with a retryable error is retried.
    model_retry: RetryPolicy = RetryPolicy()
    warning_ratio: float = 0.8

    def __attrs_post_init__(self) -> None:
        if self.on_exhaustion not in ("final-answer", "fail"):
            raise ValueError(
                f"AgentPolicy.on_exhaustion must be 'final-answer' or 'fail', got {self.on_exhaustion!r}"
            )
        ratio: object = self.warning_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio < 1:
            raise ValueError(f"AgentPolicy.warning_ratio must be between 0 and 1, got {ratio!r}")
        nested = (
            ("tool_result_bounds", ToolResultBounds),
            ("compaction", CompactionPolicy),
            ("model_retry", RetryPolicy),
        )
        for name, kind in nested:
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"AgentPolicy.{name} must be a {kind.__name__}, got {value!r}")


@attrs.frozen
class Agent:
    """An agent definition: name, instructions, toolkit, optional output type, policy."""

    name: str
    instructions: str
    policy: AgentPolicy
    toolkit: Toolkit = attrs.field(factory=Toolkit)
    output: type[Any] | None = None

    def __attrs_post_init__(self) -> None:
        name: object = self.name
        if not isinstance(name, str) or not name.strip():
            raise ValueError("Agent.name must not be empty")
        if not isinstance(self.policy, AgentPolicy):
            raise TypeError(
                f"Agent.policy must be an AgentPolicy, got {type(self.policy).__name__}"
            )
        if not isinstance(self.toolkit, Toolkit):
            raise TypeError(f"Agent.toolkit must be a Toolkit, got {type(self.toolkit).__name__}")

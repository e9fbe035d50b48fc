"""When a failed model call is tried again — pure: the policy, the error, the clock's now and the
effective deadline in, a delay (or no retry) out.

Only errors that say they are retryable (``AiError.is_retryable``: rate limits, an overloaded or
unreachable provider) are retried, up to ``RetryPolicy.attempts`` calls in all. The wait grows
exponentially with jitter, a provider's ``retry_after`` is honoured when it asks for longer — up to
an hour (:data:`LONGEST_RETRY_AFTER`): a provider asking for more (or a figure that is not one)
is not waited for, since without a deadline (``max_duration=math.inf``) the wait would be as long
as it says — and a retry that could not start before the run's deadline is not attempted: the run
then fails at once with the model's error rather than sleeping into its deadline.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from effectagent.ai import AiError
from effectagent.core import RetryPolicy

__all__ = ["LONGEST_RETRY_AFTER", "retry_delay"]

#: The longest ``retry_after`` a retry waits for, in seconds.
LONGEST_RETRY_AFTER = 3600.0

_jitter = random.Random()


def retry_delay(
    policy: RetryPolicy,
    error: AiError,
    attempt: int,
    now: float,
    deadline: float,
    draw: Callable[[], float] = _jitter.random,
) -> float | None:
    """Seconds to wait before trying again after call number ``attempt`` (1-based) failed with
    ``error``, or None: do not try again. ``draw`` gives the jitter's random number in [0, 1)."""
    if not error.is_retryable or attempt >= policy.attempts:
        return None
    base = _backoff(policy, attempt)
    delay = base * (1.0 - policy.jitter * draw())
    retry_after = getattr(error, "retry_after", None)
    if isinstance(retry_after, int | float) and not retry_after <= delay:
        if not retry_after <= LONGEST_RETRY_AFTER:  # longer than an hour, or NaN
            return None
        delay = float(retry_after)
    if now + delay >= deadline:
        return None
    return delay


def _backoff(policy: RetryPolicy, attempt: int) -> float:
    """``min(max_delay, initial_delay * multiplier ** (attempt - 1))`` — without computing a power
    that would overflow a float (after about a thousand retries at the default multiplier): past
    the power that reaches ``max_delay``, the wait is ``max_delay``."""
    initial, most, multiplier = policy.initial_delay, policy.max_delay, policy.multiplier
    if initial >= most:
        return most
    if multiplier > 1 and attempt - 1 > math.log(most / initial) / math.log(multiplier):
        return most
    return min(most, initial * multiplier ** (attempt - 1))

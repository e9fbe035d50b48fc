"""Admission quotas per principal: a token bucket each. Pure (no I/O, the time is given).

A principal may submit ``burst`` times at once, and then ``per_minute`` times a minute: its
bucket holds at most ``burst`` tokens, refills at ``per_minute / 60`` a second, and each
submission takes one. A submission that finds less than one token is refused, with the seconds
until one is there (the ``Retry-After`` of the 429 answer) — never queued. A submission the
queue then refuses (nothing admitted) gives its token back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import final

import attrs

__all__ = ["Bucket", "Quota", "QuotaBook", "give_back", "retry_after", "take"]


@attrs.frozen
class Quota:
    """``per_minute`` submissions a minute on average, ``burst`` at once at most."""

    per_minute: float
    burst: int

    def __attrs_post_init__(self) -> None:
        per_minute: object = self.per_minute
        if (
            isinstance(per_minute, bool)
            or not isinstance(per_minute, int | float)
            or not (math.isfinite(per_minute) and per_minute > 0)
        ):
            raise ValueError("a quota's per_minute must be a positive number")
        if type(self.burst) is not int or self.burst < 1:
            raise ValueError("a quota's burst must be a positive whole number")

    @property
    def rate(self) -> float:
        """Tokens a second."""
        return self.per_minute / 60.0


@attrs.frozen
class Bucket:
    """A principal's bucket: ``tokens`` as of ``at`` (seconds, any monotonic clock)."""

    tokens: float
    at: float


def take(bucket: Bucket | None, quota: Quota, now: float) -> tuple[Bucket, float]:
    """Take one token at ``now``: the bucket after, and 0.0 when admitted — else the seconds
    until a token is there (nothing taken). A bucket never seen starts full; a clock that went
    back refills nothing. Pure."""
    if bucket is None:
        bucket = Bucket(float(quota.burst), now)
    elapsed = max(0.0, now - bucket.at)
    tokens = min(float(quota.burst), bucket.tokens + elapsed * quota.rate)
    at = max(now, bucket.at)
    if tokens >= 1.0:
        return Bucket(tokens - 1.0, at), 0.0
    return Bucket(tokens, at), (1.0 - tokens) / quota.rate


def give_back(bucket: Bucket, quota: Quota, now: float) -> Bucket:
    """The bucket after a token taken from it at or before ``now`` is given back (the
    submission was not admitted): refilled to ``now``, one token more, never above ``burst`` —
    so never more than if it had not been taken. Pure."""
    elapsed = max(0.0, now - bucket.at)
    tokens = min(float(quota.burst), bucket.tokens + elapsed * quota.rate + 1.0)
    return Bucket(tokens, max(now, bucket.at))


def retry_after(wait: float) -> int:
    """A ``Retry-After`` header's whole seconds for a wait: rounded up, at least 1. Pure."""
    return max(1, math.ceil(wait - 1e-9))


@final
class QuotaBook:
    """The buckets of the principals (bounded by the principals configured: a principal is a
    name from the tokens). ``default``: every principal's quota unless ``quotas`` names one for
    it; None — and a principal whose quota is None — has no limit."""

    __slots__ = ("_buckets", "_default", "_quotas")

    def __init__(
        self, default: Quota | None, quotas: Mapping[str, Quota | None] | None = None
    ) -> None:
        self._default = default
        self._quotas = dict(quotas or {})
        self._buckets: dict[str, Bucket] = {}

    def quota_of(self, principal: str) -> Quota | None:
        """The quota ``principal`` is held to (None: none)."""
        return self._quotas.get(principal, self._default)

    def take(self, principal: str, now: float) -> float:
        """Admit one submission of ``principal`` at ``now``: 0.0, or the seconds to wait."""
        quota = self.quota_of(principal)
        if quota is None:
            return 0.0
        bucket, wait = take(self._buckets.get(principal), quota, now)
        self._buckets[principal] = bucket
        return wait

    def give_back(self, principal: str, now: float) -> None:
        """Give back the token a submission of ``principal`` took (:meth:`take` answered 0.0)
        when it was not admitted after all. Each call is one step (no await): with
        :meth:`take`, the principal is never admitted more than its quota allows, however
        its requests interleave."""
        quota = self.quota_of(principal)
        bucket = self._buckets.get(principal)
        if quota is not None and bucket is not None:
            self._buckets[principal] = give_back(bucket, quota, now)

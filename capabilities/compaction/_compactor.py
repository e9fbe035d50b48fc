"""The compactor: the engine's Compactor seam, filled by the planner and one summary call.

The engine calls :meth:`LogCompactor.compact` at the pre-turn seam when its live-context figure —
the input tokens the provider reported for the last request plus the count of what was added
since, or the whole prompt's count when there is no report — exceeds ``context_token_limit``; and
once, whatever the figure, when the model refused the context as too long. The compactor reads the
log, plans (:mod:`._planner`), and returns at most one record: a ``clear-tool-results`` one when
pruning old results is enough, else a ``summarize`` one whose summary comes from the engine's
metered ``summarize`` call over a bounded transcript — or from the host (:class:`CompactionHost`),
whose artifact is verified against the log first and, if refused, replaced by the model's summary.

**Calibration.** The planner counts with the runtime's token counter. When the provider's figure
differs from that count, the limit is restated in the counter's units. A provider counting more
may be counting a fixed overhead the messages do not show (tool schemas, framing) or tokenizing
differently (a ratio); when the difference is small enough to be an overhead (at most half the
limit), a prompt counted ``c`` is taken to cost ``max(c + overhead, c * ratio)`` — safe for either
reading — and otherwise ``c * ratio``.

**Bounds.** A summary is bounded by the plan's ``summary_room`` — at most ``summary_tokens``, at
most a quarter of the limit, and no more than the prompt has room for. The model is asked for no
more — it is the summary request's ``max_output_tokens``, and the instructions say it in words —
and what comes back (from the model or a host) is held to it: a longer summary is cut to the longest prefix within the bound, marked with a trailing ``" …"``
(:func:`~capabilities.compaction._planner.fit_summary`) — a verbose summarizer costs detail, never the
limit. The summary request itself fits the limit with the summary's room on top: the system
message the engine adds (within ``_REQUEST_OVERHEAD`` tokens), the instructions and the
transcript of the covered messages, which is cut to what is left (:func:`transcript`: the oldest
parts first, then every part shorter, the earlier summary included). When not even that can fit
— a limit too small for the instructions and the newest covered part at their shortest — no
request is sent: the summary is :data:`~capabilities.compaction._planner.ELIDED` (the covered entries
stay in the log, the prompt says something was left out) and a warning is logged.

**Failure changes nothing.** A summary call that fails (a model error) or is cancelled ends the
compaction with no record — the log is untouched and the next turn tries again. The canonical log
is never edited: the records are appended by the engine, and the prompt is a projection of the log.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from typing import Protocol, final

import attrs

from effectagent.ai import AiError, Message, SystemMessage, UserMessage
from effectagent.core import CompactionCreated, LogEntry
from effectagent.effect import Layer, is_async_callable
from effectagent.engine import CompactionRequest, CompactorService

from .._logging import log_warning
from ._artifacts import (
    ArtifactRefused,
    CompactionResult,
    accepted_versions,
    summary_text,
    verify_artifact,
)
from ._planner import ELIDED, Budget, Plan, fit_summary, plan_compaction
from ._transcript import SUMMARY_INSTRUCTIONS, transcript
from ._view import LogView

__all__ = ["COMPACTOR_VERSION", "CompactionHost", "HostRequest", "LogCompactor", "calibrated_limit"]

#: The version of this compactor's summaries.
COMPACTOR_VERSION = "effectagent-compactor/1"

#: Tokens kept free in the summary request for the system message the engine adds to it.
_REQUEST_OVERHEAD = 64


@attrs.frozen
class HostRequest:
    """What a host is asked to summarize: entries ``covers_from`` to ``covers_through`` of the
    conversation (``entries`` holds exactly them), which the prompt shows as ``messages``; the
    summary should take at most ``summary_tokens``."""

    conversation_id: str
    run_id: str
    turn: int
    covers_from: int
    covers_through: int
    entries: tuple[LogEntry, ...]
    messages: tuple[Message, ...]
    summary_tokens: int


class CompactionHost(Protocol):
    """Summarizes outside the runtime (a service, a batch job, an operator's tool)."""

    async def compaction_for(self, request: HostRequest) -> CompactionResult | None:
        """An artifact for exactly the requested range, or None to let the model summarize.

        An exception raised here (an ``Exception``: a summary service that is down) or an answer
        that is not a :class:`CompactionResult` is logged, by type, as ``compaction host failed``
        and the model summarizes instead, as for a refused artifact: a host never fails the run.

        Cancellation: the compaction is abandoned and nothing is appended.
        """
        ...


def calibrated_limit(estimated: int, counted: int, limit: int) -> int:
    """``limit`` restated in the counter's units, given the provider's figure ``estimated`` for
    a prompt the counter counts ``counted`` (see the module notes). Pure."""
    if counted <= 0 or estimated <= 0 or estimated == counted:
        return limit
    overhead = estimated - counted
    scaled = math.floor(limit * counted / estimated)
    if 0 < overhead <= limit // 2:  # may be a fixed overhead: safe for either reading
        return max(0, min(limit - overhead, scaled))
    return max(0, scaled)


@final
class LogCompactor:
    """The engine's Compactor (see the module notes).

    ``summary_tokens`` bounds a summary (as does a quarter of the limit): it is the model's output
    cap, and a longer summary, from the model or the host, is cut to it. ``host`` supplies
    summaries made elsewhere (its ``compaction_for`` an async function, else ``TypeError``);
    ``versions`` the compactor versions of host artifacts accepted (None: any; a lone str is
    refused with ``TypeError``), kept as :attr:`versions`. ``refusals`` keeps the last host
    artifacts refused, for operators.
    """

    __slots__ = ("_host", "_versions", "refusals", "summary_tokens")

    def __init__(
        self,
        *,
        summary_tokens: int = 2048,
        host: CompactionHost | None = None,
        versions: Collection[str] | None = None,
    ) -> None:
        if type(summary_tokens) is not int:
            raise TypeError(f"summary_tokens must be an int, got {type(summary_tokens).__name__}")
        if summary_tokens < 1:
            raise ValueError(f"summary_tokens must be a positive int, got {summary_tokens!r}")
        if host is not None and not callable(getattr(host, "compaction_for", None)):
            raise TypeError(f"host must be a CompactionHost, got {type(host).__name__}")
        if host is not None and not is_async_callable(host.compaction_for):
            # A plain function would fail at every compaction, logged, never here.
            raise TypeError(
                f"host must be a CompactionHost: {type(host).__name__}.compaction_for must be "
                "an async function"
            )
        self.summary_tokens = summary_tokens
        self._host = host
        self._versions = accepted_versions(versions)
        self.refusals: list[ArtifactRefused] = []

    @property
    def versions(self) -> frozenset[str] | None:
        """The compactor versions of host artifacts accepted (None: any)."""
        return self._versions

    async def compact(self, request: CompactionRequest) -> Sequence[CompactionCreated]:
        """At most one record that brings the prompt within the limit (see the module notes).

        Cancellation: the summary call (or the host) is where it waits; cancelled there, it
        returns nothing and nothing is appended.
        """
        count = request.count_tokens
        system = [m for m in request.messages[:1] if isinstance(m, SystemMessage)]
        if request.estimated_tokens <= request.context_token_limit:
            return ()
        limit = calibrated_limit(
            request.estimated_tokens, count(request.messages), request.context_token_limit
        )
        view = LogView(request.entries, count)
        budget = Budget(
            limit,
            request.keep_recent_tokens,
            max(1, min(self.summary_tokens, limit // 4)),
            request.strategy,
        )
        plan = plan_compaction(view, system, budget)
        if plan is None:
            return ()
        if plan.kind == "clear-tool-results":
            return (self._record(view, request, plan, None),)
        summary = await self._summary(request, view, plan, limit)
        if summary is None:
            return ()
        if not summary.strip():  # an empty answer summarizes nothing: as a failed summary
            log_warning(
                "compaction summary failed",
                conversation_id=request.conversation_id,
                run_id=request.run_id,
                error="EmptySummary",
            )
            return ()
        fitted = fit_summary(summary, system, plan.kept, plan.target, count, most=plan.summary_room)
        return (self._record(view, request, plan, fitted),)

    async def _summary(
        self, request: CompactionRequest, view: LogView, plan: Plan, limit: int
    ) -> str | None:
        if self._host is not None:
            found = await self._from_host(request, view, plan)
            if found is not None:
                return found
        count = request.count_tokens
        room = plan.summary_room
        head = SUMMARY_INSTRUCTIONS.format(words=max(20, room * 3 // 4)) + "\n\n"
        budget = limit - room - _REQUEST_OVERHEAD
        text = transcript(plan.covered, count, budget, head=head)
        if not text:  # not even the newest covered part fits beside the instructions
            log_warning(
                "compaction summary request cannot fit the limit",
                conversation_id=request.conversation_id,
                run_id=request.run_id,
                limit=limit,
            )
            return ELIDED
        try:
            message = UserMessage.text(head + text)
            return await request.summarize([message], max_output_tokens=max(1, room))
        except AiError as exc:
            log_warning(
                "compaction summary failed",
                conversation_id=request.conversation_id,
                run_id=request.run_id,
                error=exc.tag,
            )
            return None

    def _known_version(self, version: str) -> str | None:
        """``version`` when it is one of :attr:`versions` (configured, so safe to log), else
        None."""
        accepted = self._versions
        return version if accepted is not None and version in accepted else None

    async def _from_host(self, request: CompactionRequest, view: LogView, plan: Plan) -> str | None:
        assert self._host is not None
        first = view.summary_through + 1
        covered = tuple(e for e in view.entries if first <= e.seq <= plan.covers_through)
        asked = HostRequest(
            request.conversation_id,
            request.run_id,
            request.turn,
            first,
            plan.covers_through,
            covered,
            plan.covered,
            plan.summary_room,
        )
        try:
            artifact = await self._host.compaction_for(asked)
        except Exception as exc:  # a host that fails costs its summary, never the run
            self._host_failed(request, type(exc).__name__)
            return None
        answer: object = artifact  # what a host answers is checked, not trusted
        if answer is None:
            return None
        if not isinstance(answer, CompactionResult):
            self._host_failed(request, f"answered {type(answer).__name__}")
            return None
        artifact = answer
        try:
            _check_answer(artifact, first, plan.covers_through)
            verify_artifact(view.entries, artifact, versions=self._versions)
        except ArtifactRefused as refused:
            self.refusals = [*self.refusals[-31:], refused]
            log_warning(
                "compaction artifact refused",
                conversation_id=request.conversation_id,
                run_id=request.run_id,
                reason=refused.reason,
                # The host's text is not logged (it may hold anything, a secret too): only a
                # version this compactor was told to accept, which is the configuration's own.
                version=self._known_version(artifact.compactor_version),
            )
            return None
        return summary_text(artifact)

    @staticmethod
    def _host_failed(request: CompactionRequest, error: str) -> None:
        """The host raised (``error``: the exception's type, never its message, which may quote
        the conversation) or answered something other than an artifact: the model summarizes."""
        log_warning(
            "compaction host failed",
            conversation_id=request.conversation_id,
            run_id=request.run_id,
            error=error,
        )

    def _record(
        self, view: LogView, request: CompactionRequest, plan: Plan, summary: str | None
    ) -> CompactionCreated:
        return CompactionCreated(
            conversation_id=request.conversation_id,
            run_id=request.run_id,
            turn=request.turn,
            kind=plan.kind,
            covers_through=plan.covers_through,
            summary=summary,
            at=time.time(),
        )

    def layer(self) -> Layer:
        """This compactor as the engine's ``CompactorService``."""
        return Layer.succeed(CompactorService, self, name="LogCompactor")


def _check_answer(artifact: CompactionResult, first: int, through: int) -> None:
    """The host answered what it was asked: a summary of ``first``-``through`` (or of
    everything up to ``through``)."""
    if (artifact.covers_from, artifact.covers_through) not in ((first, through), (1, through)):
        raise ArtifactRefused(
            "range",
            f"asked for {first}-{through}, got {artifact.covers_from}-{artifact.covers_through}",
        )
    if artifact.kind != "summarize":
        raise ArtifactRefused("summary", "asked for a summary")

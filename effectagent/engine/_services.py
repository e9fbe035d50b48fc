"""What a run needs from its runtime: the services of the built Layer, resolved once per agent."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

from effectagent.ai import (
    DEFAULT_PRICES,
    Handler,
    LanguageModel,
    Message,
    OutputFormat,
    PriceTable,
    Reconcile,
    ReconcilingHandler,
    StepStore,
    SystemMessage,
    Tool,
    ToolSource,
)
from effectagent.core import Redactor

from ._output import SourceSecrets
from ._seams import (
    Approval,
    Compactor,
    ConversationLog,
    RunListener,
    RunObserver,
    SteeringInbox,
    ToolAuthorization,
    estimate_tokens,
)

if TYPE_CHECKING:
    from effectagent.core import Agent

    from ._machine_values import RunConfig

__all__ = ["RunServices", "split_handlers"]


def split_handlers(
    services: Mapping[Tool[Any, Any], Handler],
) -> tuple[dict[Tool[Any, Any], Handler], dict[Tool[Any, Any], Reconcile]]:
    """The handlers to call, and the reconcile functions bound with some of them (a
    :class:`~effectagent.ai.ReconcilingHandler` taken apart, so a call pays nothing for it)."""
    handlers: dict[Tool[Any, Any], Handler] = {}
    reconcilers: dict[Tool[Any, Any], Reconcile] = {}
    for tool, handler in services.items():
        if isinstance(handler, ReconcilingHandler):
            handlers[tool] = handler.handler
            reconcilers[tool] = handler.reconcile
        else:
            handlers[tool] = handler
    return handlers, reconcilers


@final
class RunServices:
    """The services one agent's runs use. Absent optional seams are None (decided at preflight)."""

    __slots__ = (
        "allowance",
        "approval",
        "approval_suspends",
        "authorization",
        "compactor",
        "count_tokens",
        "declared",
        "digest_arguments",
        "forget_steps",
        "grace_model",
        "grace_model_name",
        "handlers",
        "inbox",
        "listener",
        "log",
        "model",
        "model_name",
        "observers",
        "output",
        "prices",
        "reconcilers",
        "redactor",
        "run_config",
        "services_for",
        "source_secrets",
        "steps",
        "summary_model",
        "summary_model_name",
        "system",
        "tool_sources",
    )

    def __init__(
        self,
        *,
        model: LanguageModel,
        log: ConversationLog,
        redactor: Redactor,
        handlers: Mapping[Tool[Any, Any], Handler],
        approval: Approval | None,
        authorization: ToolAuthorization | None,
        compactor: Compactor | None,
        inbox: SteeringInbox | None,
        system: SystemMessage,
        observers: tuple[RunObserver, ...] = (),
        output: OutputFormat | None = None,
        digest_arguments: Callable[[Tool[Any, Any], Any], str] = lambda tool, params: "",
        count_tokens: Callable[[Sequence[Message]], int] = estimate_tokens,
        tool_sources: tuple[ToolSource, ...] = (),
        listener: RunListener | None = None,
        services_for: Callable[[Any], RunServices] | None = None,
        reconcilers: Mapping[Tool[Any, Any], Reconcile] | None = None,
        steps: StepStore | None = None,
        forget_steps: Callable[[str], None] | None = None,
        model_name: str | None = None,
        grace_model: tuple[LanguageModel, str | None] | None = None,
        summary_model: tuple[LanguageModel, str | None] | None = None,
        prices: PriceTable = DEFAULT_PRICES,
    ) -> None:
        self.system = system  # the agent's instructions, the first message of every prompt
        # The model of the turns, the grace turn's and compaction's summary model, and what
        # records call each (``engine._models``); the latter two default to the first.
        self.model = model
        self.model_name = model_name
        self.grace_model, self.grace_model_name = grace_model or (model, model_name)
        self.summary_model, self.summary_model_name = summary_model or (model, model_name)
        self.log = log
        self.redactor = redactor
        # Which tool source tools hold a secret, checked once per snapshot (``_edges``).
        self.source_secrets = SourceSecrets(redactor)
        self.handlers = handlers
        self.approval = approval
        # Whether the approver may answer that a decision comes later (ApprovalSuspended).
        self.approval_suspends = bool(getattr(approval, "suspends", False))
        self.authorization = authorization
        self.compactor = compactor
        self.inbox = inbox
        self.output = output  # the JSON Schema of the agent's output, sent with every request
        # The runtime's keyed digest of a call's decoded arguments (approval requests).
        self.digest_arguments = digest_arguments
        # How compaction counts a prompt's tokens (a TokenCounter's ``count``, or the estimate).
        self.count_tokens = count_tokens
        # Told when each run starts and ends: the steering inbox first, then the observers.
        self.observers = ((inbox,) if inbox is not None else ()) + observers
        # Asked for their tools at the start of every turn (``Agent.tool_sources``, in order).
        self.tool_sources = tool_sources
        # Sees every event as it is emitted, and is entered around each tool call (optional).
        self.listener = listener
        # The runtime's services of another agent (a child run's), preflighted (child runs).
        self.services_for = services_for
        # The reconcile functions bound with handlers (a call that may have run, when resumed).
        self.reconcilers: Mapping[Tool[Any, Any], Reconcile] = reconcilers or {}
        # Where durable steps' results are recorded, and — for the runtime's own in-memory
        # store — how a run's results are dropped when it ends.
        self.steps = steps
        self.forget_steps = forget_steps
        # What model calls are costed with (the Layer's PricesService, or the shipped table).
        self.prices = prices
        # The run's allowance as its input record keeps it (``RunAllowance.as_json()``), or None.
        self.allowance: dict[str, Any] | None = None
        # The services the agent declares (``Agent.services``) for its computed instructions and
        # context hook, by key (resolved at preflight).
        self.declared: Mapping[Any, Any] = {}
        # The config of the runs of an agent on these services, made by the first of them (a
        # memo: every run would make the same value; see ``RunEdges._config``).
        self.run_config: tuple[Agent, RunConfig] | None = None

    def with_models(
        self,
        system: SystemMessage,
        model: tuple[LanguageModel, str | None],
        grace_model: tuple[LanguageModel, str | None],
        summary_model: tuple[LanguageModel, str | None],
    ) -> RunServices:
        """These services with other models (a run that names its own) and the system message
        that goes with them."""
        copy = self._copy()
        copy.system = system
        copy.model, copy.model_name = model
        copy.grace_model, copy.grace_model_name = grace_model
        copy.summary_model, copy.summary_model_name = summary_model
        return copy

    def with_system(self, system: SystemMessage) -> RunServices:
        """These services with another system message (instructions a run computed)."""
        copy = self._copy()
        copy.system = system
        return copy

    def with_allowance(self, allowance: dict[str, Any]) -> RunServices:
        """These services for a run given ``allowance`` (recorded with the run's input)."""
        copy = self._copy()
        copy.allowance = allowance
        return copy

    def _copy(self) -> RunServices:
        copy = object.__new__(RunServices)
        for name in RunServices.__slots__:
            setattr(copy, name, getattr(self, name))
        return copy

    def with_handlers(
        self,
        handlers: Mapping[Tool[Any, Any], Handler],
        reconcilers: Mapping[Tool[Any, Any], Reconcile] | None = None,
    ) -> RunServices:
        """These services with ``handlers`` (and ``reconcilers``) instead (a turn's tools from
        its tool sources)."""
        copy = self._copy()
        copy.handlers = handlers
        if reconcilers is not None:
            copy.reconcilers = reconcilers
        return copy

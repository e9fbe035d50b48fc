"""The curated public surface of each package: exactly the pinned names, complete, documented,
and nothing leaking.

Add a package to ``PACKAGES`` when it gets a public ``__init__``. A name enters a package's
``__all__`` only together with its line in ``SURFACE``: the surface is what users and the other
packages may rely on (``tests/import_contracts.py`` lets a package import nothing of another but
what its ``__init__`` names), so every addition is a decision, never an accident. The same goes
for a public submodule (``PUBLIC_SUBMODULES``) and for an internal name one of our packages
re-exports for the others (``INTERNAL``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import pkgutil
import types
from typing import Any

import pytest

PACKAGES = [
    "effectagent",
    "effectagent.effect",
    "effectagent.ai",
    "effectagent.core",
    "effectagent.engine",
    "effectagent.testing",
    "effectagent.providers",
    "sandbox",
]

#: Each package's ``__all__``, exactly.
SURFACE: dict[str, str] = {
    "effectagent": """
        Agent AgentPolicy ChildBudget Context LanguageModelService Layer open_runtime run_sync
        RunAllowance RunResult Runtime ServiceKey TaggedError Tool tool ToolCallContext Toolkit
    """,
    "effectagent.effect": """
        attempt AttributeValue build_layer Cause checked_encoder Context decode decode_json Die
        encode encode_as Exit Fail Failure Fiber field_meta Interrupt is_async_callable json_schema
        JSONValue Layer
        make_json_converter merge MissingRequirement MissingServicesError open_scope parse_json_text
        propagates
        preflight SchemaDerivationError SchemaError SchemaIssue SchemaLimits Scope ScopeClosedError
        Semaphore ServiceKey SpanHandle SpanKind Success TaggedError trace_span use_span_starter
    """,
    "effectagent.engine": """
        AllowanceRefused Approval ApprovalError ApprovalService ApprovalSuspended AuthorizationDecision
        ChildRunRefused
        ChildRunResult CompactionRequest Compactor CompactorService ConversationBusy
        ConversationEvicted ConversationExists ConversationLog ConversationLogError
        ConversationLogService estimate_tokens InMemoryConversationLog InMemoryStepStore
        InstructionsLeakSecret LogRetention LOGGER_NAME MissingModels observe_runs open_runtime
        OutputStream OutputUpdate
        pending_approvals reduce_events RedactorService run_child run_sync RunAlreadyEnded
        RunEnding RunExists RunFailedError RunInfo RunListener RunListenerService RunObserver
        RunObserversService RunResult RunStream Runtime SteeringInbox SteeringInboxService
        SteeringInput StepStoreService TokenCounter TokenCounterService ToolAuthorization
        ToolAuthorizationService UnknownConversation UnknownRun
        MediaMissing MediaNotKept MediaStore
    """,
    "effectagent.ai": """
        AiError AssistantMessage AuthenticationFailed Binding close_stream ContentFiltered
        ContextLengthExceeded DEFAULT_ARGUMENT_LIMITS DEFAULT_MAX_RESPONSE_BYTES
        DEFAULT_MAX_TOOL_ARGUMENT_BYTES encode_failure FailureMode FinishPart FinishReason
        format_bytes generate Handler handler_result InnerResult InputTokens InvalidModelRequest
        LanguageModel LanguageModelService MalformedResponse Message ModelNetworkError ModelRequest
        ModelResponse ModelUnavailable OutcomeUnknown OutputFormat OutputSchemaViolation
        ProviderError RateLimited ReasoningContent ReasoningDeltaPart ReasoningEndPart
        ReasoningStartPart Reconcile Reconciled ReconcilingHandler ResponseMetadataPart
        ResponsePart ResponseReducer ResponseTooLarge StepKey StepResult StepStore
        SystemMessage TextContent TextDeltaPart TextEndPart TextStartPart Tool tool ToolAnnotations
        ToolBroker ToolCallContent ToolCallContext ToolCallPart ToolDescriptor Toolkit ToolMessage
        ToolParamsDeltaPart ToolParamsEndPart ToolParamsStartPart ToolResultContent ToolSnapshot
        ToolSource TruncatedToolCall Usage UserMessage
        FallbackChain FallbackModel falls_back ModelChoice ModelKey RoutingModel
        DEFAULT_PRICES dollars fresh_call_ids MAX_CACHE_MARKS MICROS_PER_DOLLAR model_name_of NoPriceForModel
        Price PRICES_TAKEN PricesService PriceTable PromptCaching
        DEFAULT_MAX_NATIVE_BLOCK_BYTES DEFAULT_MAX_NATIVE_BYTES NativeReasoningContent
        NativeReasoningPart
        AudioPart DEFAULT_MAX_MEDIA_BYTES describe_media DocumentPart ImagePart MEDIA_TYPES
        media_as_text media_from_bytes media_from_path MediaError MediaKind MediaNotSupported
        MediaPart MediaRef sniff_media_type split_media
    """,
    "effectagent.core": """
        Agent AgentPolicy AgentStateWritten ApprovalDecision ApprovalDenied ApprovalRequest
        ApprovalRequested approval_decided assistant_message_of batch_spans bounded_json cut_off_note splits_a_batch bounded_parsed BudgetExhausted
        CheckContext FinalAnswer Guardrail GuardrailFailed GuardrailResult GuardrailTripped OneOf
        one_of OutputValidatorFailed RejectOutput FINAL_RESULT final_result_names
        DefaultInput InstructionsContext InstructionsFailed InstructionsRecorded ModelUsageRecorded
        MAX_INSTRUCTIONS_BYTES MAX_PREPARED_BYTES MAX_PREPARED_ITEMS PrepareContextFailed
        PreparedContext TurnContext
        check_model_choice
        BudgetWarning ChildBudget compact_json CompactionCreated CompactionPerformed
        CompactionPolicy ContextAdded ContextItem ConversationCreated EngineDefect Event EventBase
        FinalTurnDeclaredTools LogEntry ModelFailed ModelResponseRecorded ModelRetrying
        ModelStarted native_reasoning_entry native_reasoning_of OutputInvalid parse_arguments
        project_messages ReasoningDelta Record media_parts_of user_message_of
        redact_arguments redact_json_text REDACTED Redactor RepeatedToolFailure ResponseLimits
        RetryPolicy Risk RunAllowance RunCompleted RunCompletedRecord RunError RunFailed RunFailedRecord
        RunInterrupted RunStarted RunSuspended SecretRedactor StorageFailed StreamRedactor
        SubagentCompleted SubagentEvent SubagentStarted TERMINAL_EVENTS TextDelta
        ToolApprovalDecided ToolApprovalRequested ToolCallDeclared ToolCallFailed ToolCallPrepared
        ToolCallSettled ToolCallStarted ToolCallSucceeded ToolDefect ToolFailedRun ToolFailure
        ToolInvalidInput ToolOutcome ToolProgress ToolRejected ToolResultBounds ToolSourceFailed ToolSuccess
        ToolUnknownOutcome TurnCompleted TurnStarted UsageDelta UsageTotals UserInputRecorded
    """,
    "effectagent.testing": """
        assert_same_records batches BatchReport BatchSpec CallSpec canonical_records Cassette
        CASSETTE_VERSION CassetteDivergence CassetteError cassette_of_log ChaosReport Exchange
        fault_plans FaultPlan FunctionModel invariant_violations ModelFault PROBE_TOOLKIT record
        RecordsDiffer ReplayModel run_batch run_batch_sync run_chaos run_chaos_sync ScriptedModel
        ScriptExhausted SimulatedDefect ToolFault Turn UnconsumedScript with_faults
    """,
    "effectagent.providers": """
        Anthropic Gemini model_layer model_settings ModelSettings open_model OpenAIChat
        OpenAICompatible OpenAIResponses MediaSupport media_support
    """,
    "sandbox": """
        Artifact ArtifactRule BubblewrapSandbox CodeExecutionError CodeExecutionHost
        CodeExecutionLimits CodeExecutionRequest CodeExecutionResult CodeExecutor
        CodeExecutorService CodeTimeout CommandNotFound deno_executor_layer DenoCodeExecutor
        ExecutorCrashed ExecutorUnavailable HostCallFailed HostCallLimitExceeded HostCallOutcome
        HostCallSucceeded HostCallTooLarge InvalidProgram Isolation JSONTooDeep LimitNotEnforceable
        LocalProcessSandbox LogLine MemoryLimitExceeded Mount MountMode NetworkPolicy
        open_deno_executor OutputChunk OutputLimitExceeded OwnedResources ProgramThrew
        ResourceUsage ResultTooLarge run Sandbox SandboxError SandboxEvent SandboxExecution
        SandboxExited SandboxImplementation SandboxLimits SandboxRequest SandboxResult
        SandboxService SandboxStarted SandboxUnavailable SecretHandle SecretResolver
        SecretResolverService SourceTooLarge UNLIMITED Unlimited WorkloadIdentity
    """,
}

#: The public (no leading ``_``) submodules of each package; every other module is private.
PUBLIC_SUBMODULES: dict[str, set[str]] = {
    "effectagent": {"ai", "core", "effect", "engine", "providers", "testing"},
}

#: Our own functions and classes a package names under a ``_`` name, outside ``__all__``, for
#: effectagent's other packages only (the import contract allows them nothing else).
INTERNAL: dict[str, set[str]] = {
    # The cheaper attrs ``__init__`` that ai, core and engine put on their hot classes.
    "effectagent.effect": {"_fast_init"},
}


def _public_names(package: str) -> list[str]:
    module = importlib.import_module(package)
    names = module.__all__
    assert isinstance(names, list | tuple)
    return list(names)


def _own_docstring(obj: Any) -> str | None:
    """The object's own docstring (a class does not count its base class's)."""
    if isinstance(obj, type):
        doc = obj.__dict__.get("__doc__")
        return doc if isinstance(doc, str) else None
    return inspect.getdoc(obj)


def _is_data(obj: Any) -> bool:
    """A type alias or constant: it cannot carry a docstring of its own."""
    if hasattr(obj, "__wrapped__"):  # a decorated function (functools.cache, ...) documents itself
        return False
    return not isinstance(
        obj, type | types.FunctionType | types.BuiltinFunctionType | types.ModuleType
    )


def _attribute_doc(package: str, name: str, obj: Any) -> str | None:
    """The Sphinx-style documentation of a module-level assignment ``name = ...`` in the submodule
    that defines ``obj``: ``#:`` comment lines right above it, or a string literal right below."""
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}."):
        submodule = importlib.import_module(info.name)
        if getattr(submodule, name, None) is not obj:
            continue
        source = inspect.getsource(submodule)
        lines = source.splitlines()
        body = ast.parse(source).body
        for index, stmt in enumerate(body):
            if not _assigns(stmt, name):
                continue
            following = body[index + 1] if index + 1 < len(body) else None
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                return following.value.value
            above = list(
                itertools.takewhile(
                    lambda line: line.startswith("#:"), reversed(lines[: stmt.lineno - 1])
                )
            )
            if above:
                return "\n".join(reversed(above))
    return None


def _assigns(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    return False


@pytest.mark.parametrize("package", PACKAGES)
def test_all_has_no_duplicates(package: str) -> None:
    names = _public_names(package)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_importable(package: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"from {package} import *", namespace)
    missing = [name for name in _public_names(package) if name not in namespace]
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_documented(package: str) -> None:
    module = importlib.import_module(package)
    undocumented = []
    for name in _public_names(package):
        obj = getattr(module, name)
        doc = _attribute_doc(package, name, obj) if _is_data(obj) else _own_docstring(obj)
        if not doc or not doc.strip():
            undocumented.append(name)
    assert undocumented == [], "no docstring (or, for an alias or constant, no `#:` comment)"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_attribute_is_in_all(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(_public_names(package))
    leaked = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and name not in exported
        # A subpackage or submodule of this package is an attribute too, but not a re-export.
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith(f"{package}."))
    ]
    assert leaked == [], "public names in the package namespace but not in __all__"


@pytest.mark.parametrize("package", PACKAGES)
def test_exports_come_from_our_own_modules(package: str) -> None:
    """A re-export is one of ours (not a stray ``import trio`` leaking through)."""
    module = importlib.import_module(package)
    root = package.split(".")[0]
    foreign = []
    for name in _public_names(package):
        obj = getattr(module, name)
        owner = getattr(obj, "__module__", None)
        if _is_data(obj):
            defined_here = any(
                getattr(importlib.import_module(info.name), name, None) is obj
                for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}.")
            )
            if not defined_here:
                foreign.append(name)
        elif not isinstance(owner, str) or not owner.startswith(f"{root}."):
            foreign.append(name)
    assert foreign == []


def _pinned(package: str) -> set[str]:
    return set(SURFACE[package].split())


@pytest.mark.parametrize("package", [p for p in PACKAGES if p in SURFACE])
def test_all_is_exactly_the_pinned_surface(package: str) -> None:
    exported = set(_public_names(package))
    pinned = _pinned(package)
    assert sorted(exported - pinned) == [], "exported but not pinned in SURFACE"
    assert sorted(pinned - exported) == [], "pinned in SURFACE but no longer exported"


def public_submodules(package: str) -> set[str]:
    """The submodules of ``package`` whose name has no leading underscore."""
    module = importlib.import_module(package)
    return {info.name for info in pkgutil.iter_modules(module.__path__) if info.name[0] != "_"}


def internal_reexports(package: str, root: str) -> set[str]:
    """Our own functions and classes (defined under ``root``) that ``package`` names with a
    leading underscore — reachable by other packages, though outside ``__all__``."""
    module = importlib.import_module(package)
    return {
        name
        for name, value in vars(module).items()
        if name.startswith("_")
        and not name.startswith("__")
        and not isinstance(value, types.ModuleType)
        and str(getattr(value, "__module__", "")).startswith(f"{root}.")
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_only_the_pinned_submodules_are_public(package: str) -> None:
    assert public_submodules(package) == PUBLIC_SUBMODULES.get(package, set())


@pytest.mark.parametrize("package", PACKAGES)
def test_only_the_pinned_internal_names_are_re_exported(package: str) -> None:
    root = package.split(".")[0]
    assert internal_reexports(package, root) == INTERNAL.get(package, set())


def test_a_pinned_internal_name_stays_out_of_the_surface() -> None:
    for package, names in INTERNAL.items():
        assert not names & set(_public_names(package))
        namespace: dict[str, Any] = {}
        exec(f"from {package} import *", namespace)
        assert not names & set(namespace)

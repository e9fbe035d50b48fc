"""The curated public surface of the capabilities packages: exactly the pinned names, complete,
documented, nothing leaking (the same checks ``tests/effect/test_exports.py`` makes for the base
packages). A name enters an ``__all__`` only together with its line in ``SURFACE``."""

from __future__ import annotations

import importlib
import pkgutil
import types
from collections import defaultdict
from typing import Any

import pytest

from tests.effect.test_exports import PACKAGES as BASE_PACKAGES
from tests.effect.test_exports import (
    _attribute_doc,
    _is_data,
    _own_docstring,
    internal_reexports,
    public_submodules,
)

PACKAGES = [
    "capabilities",
    "capabilities.storage",
    "capabilities.sessions",
    "capabilities.state",
    "capabilities.steering",
    "capabilities.approval",
    "capabilities.authorization",
    "capabilities.compaction",
    "capabilities.code_mode",
    "capabilities.mcp",
    "capabilities.skills",
    "capabilities.subagents",
    "capabilities.telemetry",
    "capabilities.cli",
    "capabilities.durable",
    "capabilities.serve",
]

#: Each package's ``__all__``, exactly.
SURFACE: dict[str, str] = {
    "capabilities": """
        AccessPolicy AccessRule AgentStateService ApprovalPolicy ApprovalRule Compensatable
        DurableQueue DurableWorker in_memory_storage InteractiveApproval LogCompactor PolicyApproval PolicyAuthorization
        RunLocal ScriptedApproval Session SessionConflict SessionCreate SessionPatch SessionSchema
        SessionStoreService sqlite_storage postgres_storage StateConflict StateSlot SteeringService
        SuspendingApproval Uncertain WithRecord
    """,
    "capabilities.approval": """
        Answer ApprovalClosed ApprovalNotPending ApprovalOpened ApprovalPolicy ApprovalRule
        ApprovalSubject ApprovalUpdate Decision InteractiveApproval Known Parameters
        PendingApproval PolicyApproval ScriptedApproval SuspendingApproval ToolRegistry Unknown
        Verdict
    """,
    "capabilities.authorization": """
        AccessDecision AccessPolicy AccessRule AccessSubject Effect PolicyAuthorization
    """,
    "capabilities.cli": """
        Config ConfigError load_config main Timeline
    """,
    "capabilities.code_mode": """
        code_mode CodeMode CodeModeBuildError CodeModeFailed CodeModeInput CodeModeLimits
        CodeModeOutput
    """,
    "capabilities.compaction": """
        ArtifactRefused compaction_artifacts CompactionHost CompactionResult HostRequest
        LogCompactor rebuild_compactions RetainedFact source_digest TokenizerCounter
        verify_artifact
    """,
    "capabilities.mcp": """
        connect HttpServer McpConnectError McpConnection McpLimits McpPrompt McpPromptResult
        McpRequestError McpResource McpResourceContents McpResultTooLarge McpServer McpToolError
        McpUnavailable ServerIdentity SkippedTool StdioServer
    """,
    "capabilities.sessions": """
        Session SessionConflict SessionCreate SessionExists SessionNotFound SessionPatch
        SessionSchema SessionStore SessionStoreError SessionStoreService UnknownSessionVersion
    """,
    "capabilities.skills": """
        ActivatedSkill activation_tool compute_integrity discover_skills Integrity
        SkillAuthorization SkillDecision SkillError SkillInfo SkillLibrary SkillManifestError
        SkillNotFound SkillPathEscapes SkillRule SkillSubject SkillTampered
    """,
    "capabilities.state": """
        AgentState AgentStateError AgentStateService Compensatable RunLocal RunNotObserved
        StateConflict StateSlot StateView StateWritten Uncertain UnsettledState WithRecord
        WriteClass
    """,
    "capabilities.steering": """
        InputReceipt InputStatus Steering SteeringLimits SteeringService
    """,
    "capabilities.storage": """
        BusyPolicy CannotOpenDatabase ConversationInUse DatabaseBusy DatabaseInUse DatabaseTooNew
        LaneLost open_database SqliteConversationLog SqliteDatabase DatabaseService
        StorageError Synchronous UnsafeDatabaseFile Connection Cursor Database Dialect
        ForeignSchema PostgresDatabase SchemaInUse open_postgres sweep_media
    """,
    "capabilities.durable": """
        AgentNotFound AuditRow classify ConversationOwned CRASH_POINTS CrashPoint Diagnostic
        DurableApproval
        DurableError DurableQueue DurableWorker Explanation FAILPOINT_ENV failpoint
        IdempotencyConflict LedgerFacts LogFacts Mode NoPendingApproval NotDeadLettered
        Quarantined Receipt RecoveryDecision RetryBudget SqliteStepStore Submission
        SubmissionNotFound SubmissionStatus UnknownCall WorkerOptions
    """,
    "capabilities.serve": """
        DEFAULT_QUOTA Endpoint ENDPOINTS hypercorn_config LiveFeed LiveRelay LiveText live_relay
        metrics_available openapi_document Principal Problem Quota RunListeners serve ServeApi ServeMetrics
        ServeSettings token_digest Tokens
    """,
    "capabilities.subagents": """
        delegate Delegation SubagentFailed
    """,
    "capabilities.telemetry": """
        add_trace_ids Telemetry
    """,
}

#: The public (no leading ``_``) submodules of each package; every other module is private.
PUBLIC_SUBMODULES: dict[str, set[str]] = {
    "capabilities": {
        "approval",
        "authorization",
        "cli",
        "code_mode",
        "compaction",
        "durable",
        "mcp",
        "serve",
        "sessions",
        "skills",
        "state",
        "steering",
        "storage",
        "subagents",
        "telemetry",
    },
    "capabilities.cli": {"render"},  # the timeline the demo shows too
}


def _names(package: str) -> list[str]:
    return list(importlib.import_module(package).__all__)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_is_unique_importable_and_documented(package: str) -> None:
    module = importlib.import_module(package)
    names = _names(package)
    assert len(names) == len(set(names))
    namespace: dict[str, Any] = {}
    exec(f"from {package} import *", namespace)
    assert [n for n in names if n not in namespace] == []
    undocumented = []
    for name in names:
        obj = getattr(module, name)
        doc = _attribute_doc(package, name, obj) if _is_data(obj) else _own_docstring(obj)
        if not doc or not doc.strip():
            undocumented.append(name)
    assert undocumented == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_attribute_is_left_out_of_all(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(_names(package))
    leaked = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and name not in exported
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith("capabilities."))
    ]
    assert leaked == []


@pytest.mark.parametrize("package", PACKAGES)
def test_exports_are_our_own(package: str) -> None:
    module = importlib.import_module(package)
    for name in _names(package):
        obj = getattr(module, name)
        owner = getattr(obj, "__module__", None)
        if not _is_data(obj):
            assert isinstance(owner, str)
            assert owner.startswith("capabilities."), name


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_exactly_the_pinned_surface(package: str) -> None:
    exported = set(_names(package))
    pinned = set(SURFACE[package].split())
    assert sorted(exported - pinned) == [], "exported but not pinned in SURFACE"
    assert sorted(pinned - exported) == [], "pinned in SURFACE but no longer exported"


@pytest.mark.parametrize("package", PACKAGES)
def test_only_the_pinned_submodules_are_public(package: str) -> None:
    assert public_submodules(package) == PUBLIC_SUBMODULES.get(package, set())


@pytest.mark.parametrize("package", PACKAGES)
def test_no_internal_name_is_re_exported(package: str) -> None:
    assert internal_reexports(package, "capabilities") == set()


def test_a_name_means_one_thing_in_every_package() -> None:
    """A name two packages export is one object re-exported, never two things that collide (as
    Code Mode's and the skills' ``FailureKind`` did)."""
    meanings: dict[str, dict[str, object]] = defaultdict(dict)
    for package in [*BASE_PACKAGES, *PACKAGES]:
        module = importlib.import_module(package)
        for name in module.__all__:
            meanings[name][package] = getattr(module, name)
    clashes = {
        name: sorted(where)
        for name, where in meanings.items()
        if len({id(value) for value in where.values()}) > 1
    }
    assert clashes == {}


def test_json_value_is_the_effect_cores_everywhere() -> None:
    """One JSON type: a module of ours that has a ``JSONValue`` has the effect core's (the AI
    layer once defined its own, an alias of ``Any``)."""
    from effectagent.effect import JSONValue

    others = []
    for root in ("effectagent", "capabilities", "sandbox"):
        package = importlib.import_module(root)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}."):
            if info.name.endswith(".__main__"):
                continue  # a command, not a module to import
            module = importlib.import_module(info.name)
            if getattr(module, "JSONValue", JSONValue) is not JSONValue:
                others.append(info.name)
    assert others == []

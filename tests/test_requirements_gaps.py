"""Claims of ``docs/requirements.md`` that no other test pinned down: each test names its row.

The figures a row promises (defaults, limits) are checked as figures here, so that changing one
means changing the row too; behaviours a row promises are checked through the public API.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from capabilities import PolicyApproval, ScriptedApproval, sqlite_storage
from capabilities.approval import Answer
from capabilities.authorization import AccessRule, PolicyAuthorization
from capabilities.storage import Connection, DatabaseService
from effectagent import (
    Agent,
    AgentPolicy,
    RunAllowance,
    Tool,
    ToolCallContext,
    Toolkit,
    open_runtime,
)
from effectagent.ai import (
    DEFAULT_MAX_MEDIA_BYTES,
    DEFAULT_MAX_NATIVE_BLOCK_BYTES,
    DEFAULT_MAX_NATIVE_BYTES,
    MAX_CACHE_MARKS,
    ImagePart,
    MediaError,
    ToolSnapshot,
    ToolSource,
)
from effectagent.core import (
    MAX_INSTRUCTIONS_BYTES,
    MAX_PREPARED_BYTES,
    MAX_PREPARED_ITEMS,
    BudgetWarning,
    ToolInvalidInput,
    ToolOutcome,
    ToolRejected,
    ToolSuccess,
)
from effectagent.effect import Layer, ServiceKey, build_layer, open_scope
from effectagent.engine import AllowanceRefused, LogRetention
from effectagent.testing import ScriptedModel, Turn

KIB = 1024
MIB = 1024 * KIB
#: The first bytes of a PNG file: what makes bytes an image.
PNG_HEAD = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
)


# ---- the figures the rows promise ----------------------------------------------------------------


def test_the_in_memory_logs_default_retention_is_the_rows_figures() -> None:
    """Row "a long-lived runtime": 1,000 conversations, about 64 MiB; keep_everything keeps all."""
    default = LogRetention()
    assert (default.max_conversations, default.max_bytes) == (1_000, 64 * MIB)
    everything = LogRetention.keep_everything()
    assert (everything.max_conversations, everything.max_bytes) == (None, None)


def test_the_policys_defaults_are_the_rows_figures() -> None:
    """Rows "§4 repeated failures" (3), "§4 budgets" (a warning at 80 %), "prompt caching" (off
    by default) and "response bounds" (no cap of the policy's own: the adapter's default)."""
    policy = AgentPolicy()
    assert policy.repeated_failure_limit == 3
    assert policy.warning_ratio == 0.8
    assert policy.prompt_caching is None
    assert policy.max_output_tokens is None


def test_the_bounds_the_rows_name_are_their_figures() -> None:
    """Rows "prompt caching" (at most 4 marks), "native reasoning" (512 KiB a block, 2 MiB a
    response), "computed instructions" (256 KiB) and "per-turn context hook" (16 items, 64 KiB)."""
    assert MAX_CACHE_MARKS == 4
    assert (DEFAULT_MAX_NATIVE_BLOCK_BYTES, DEFAULT_MAX_NATIVE_BYTES) == (512 * KIB, 2 * MIB)
    assert MAX_INSTRUCTIONS_BYTES == 256 * KIB
    assert (MAX_PREPARED_ITEMS, MAX_PREPARED_BYTES) == (16, 64 * KIB)


def test_a_media_part_over_20_mib_is_refused_by_default_and_one_of_20_mib_taken() -> None:
    """Row "media in prompts": over 20 MiB refused with a sentence, by default."""
    assert DEFAULT_MAX_MEDIA_BYTES == 20 * MIB
    at_the_limit = PNG_HEAD + bytes(20 * MIB - len(PNG_HEAD))
    assert ImagePart(at_the_limit).size == 20 * MIB
    refusal = "the image is 20,971,521 bytes, over the limit of 20,971,520 bytes"
    with pytest.raises(MediaError, match=refusal):
        ImagePart(at_the_limit + b"\x00")


# ---- "§4 budgets": a warning for the tool calls too ----------------------------------------------


@attrs.frozen
class _Path:
    path: str


_READ = Tool("read_file", "Read a file.", parameters=_Path, success=str, readonly=True)
_DELETE = Tool("delete_file", "Delete a file.", parameters=_Path, success=str, needs_approval=True)


async def _handle(params: _Path, call: ToolCallContext) -> str:
    return f"{call.tool_name} {params.path}"


async def test_the_tool_call_budget_warns_once_at_80_percent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Row "§4 budgets": BudgetWarning once per dimension at 80 % — here the tool calls, through
    the engine (turns, tokens, duration and cost have tests of their own)."""
    agent = Agent(
        "reader", "Read files.", AgentPolicy(max_turns=50, max_tool_calls=5), Toolkit(_READ)
    )
    model = ScriptedModel(
        [
            *[Turn.tool_calls(("read_file", {"path": f"/{i}"}, f"c{i}")) for i in range(5)],
            Turn.text("Done."),
        ]
    )
    layer = agent.toolkit.handlers({_READ: _handle}) + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime, runtime.stream(agent, "Go.") as run:
        events = [event async for event in run]
    warnings = [(e.dimension, e.used, e.limit) for e in events if isinstance(e, BudgetWarning)]
    assert warnings == [("tool_calls", 4, 5)]


# ---- defaults that deny -----------------------------------------------------------------------


async def _outcomes(layer: Layer) -> tuple[ToolOutcome, ...]:
    agent = Agent("files", "Manage files.", AgentPolicy(max_turns=4), Toolkit(_READ, _DELETE))
    model = ScriptedModel(
        [
            Turn.tool_calls(("read_file", {"path": "/a"}), ("delete_file", {"path": "/a"})),
            Turn.text("done"),
        ]
    )
    handlers = agent.toolkit.handlers({_READ: _handle, _DELETE: _handle})
    async with open_runtime(handlers + model.as_layer() + layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Tidy up.")
    return tuple(result.outcomes)


def _approve_all() -> Layer:
    return ScriptedApproval(lambda _: Answer.approve()).layer()


async def test_without_a_matching_access_rule_a_call_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Row "spec §5 authorization": the default denies, and the model reads why."""
    outcomes: Any = await _outcomes(PolicyAuthorization().layer() + _approve_all())
    assert [type(o) for o in outcomes] == [ToolRejected, ToolRejected]
    outcomes = await _outcomes(
        PolicyAuthorization([AccessRule.allow("read_*")]).layer() + _approve_all()
    )
    assert [type(o) for o in outcomes] == [ToolSuccess, ToolRejected]
    assert outcomes[1].reason.startswith("not authorized")


async def test_an_approval_policy_without_a_matching_rule_denies(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Row CAP-006: a policy provider's default is deny."""
    outcomes: Any = await _outcomes(PolicyApproval([]).layer())
    assert [type(o) for o in outcomes] == [ToolSuccess, ToolRejected]  # read needs no approval
    assert outcomes[1].reason.startswith("approval denied")


# ---- "§4 classes": the SQLite file ----------------------------------------------------------------


def _pragmas(connection: Connection) -> tuple[object, object]:
    synchronous = connection.execute("PRAGMA synchronous").fetchone()
    journal = connection.execute("PRAGMA journal_mode").fetchone()
    assert synchronous is not None
    assert journal is not None
    return synchronous[0], journal[0]


@pytest.mark.parametrize(("given", "level"), [({}, 2), ({"synchronous": "normal"}, 1)])
async def test_sqlite_storage_is_wal_and_synchronous_full_by_default(
    tmp_path: Path, given: dict[str, Any], level: int
) -> None:
    """Row "§4 classes": one SQLite file in WAL mode, ``synchronous="full"`` by default (SQLite's
    level 2; "normal" is 1) for the connection that writes; the readers see the same journal."""
    async with open_scope() as scope:
        services = await build_layer(sqlite_storage(tmp_path / "agent.db", **given), scope)
        database = services.require(DatabaseService)
        assert await database.write(_pragmas) == (level, "wal")
        assert (await database.read(_pragmas))[1] == "wal"


# ---- "§1 package edges": the contracts themselves, not only their checker ---------------------


def test_the_packages_keep_their_import_contracts() -> None:
    """Row "§1 package edges": the import-linter contracts of ``pyproject.toml`` (what
    ``make test`` runs as ``lint-imports``) hold for the code as it is. In a process of its own:
    import-linter configures logging as it runs, which would silence the suite's loggers."""
    root = Path(__file__).resolve().parent.parent
    command = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 broken" in done.stdout


# ---- "run allowances": an agent with tool sources ---------------------------------------------

_REMOTE = Tool("remote_read", "Read a remote file.", parameters=_Path, success=str, readonly=True)
_SOURCE: ServiceKey[ToolSource] = ServiceKey("tests.requirements.source")


class _Source:
    def snapshot(self) -> ToolSnapshot:
        return ToolSnapshot((_REMOTE,), {"remote_read": _handle})


async def test_an_allowance_naming_tools_leaves_the_tool_sources_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Row "run allowances": tools from tool sources cannot be selected; an allowance that names
    tools leaves the sources out, and ``approval="always"`` over sources needs the tools named."""
    agent = Agent(
        "reader", "Read files.", AgentPolicy(max_turns=4), Toolkit(_READ), tool_sources=[_SOURCE]
    )
    model = ScriptedModel(
        [
            Turn.tool_calls(("remote_read", {"path": "/a"}), ("read_file", {"path": "/b"})),
            Turn.text("done"),
        ]
    )
    layer = (
        agent.toolkit.handlers({_READ: _handle})
        + model.as_layer()
        + Layer.succeed(_SOURCE, _Source())
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Go.", allowance=RunAllowance(tools=["read_file"]))
        assert [d.name for d in model.requests[0].tools] == ["read_file"]
        assert [type(o) for o in result.outcomes] == [ToolInvalidInput, ToolSuccess]
        with pytest.raises(AllowanceRefused, match="remote_read"):
            await runtime.run(agent, "Go.", allowance=RunAllowance(tools=["remote_read"]))
        with pytest.raises(AllowanceRefused, match="tool sources offer turn by turn"):
            await runtime.run(agent, "Go.", allowance=RunAllowance(approval="always"))
    assert len(model.requests) == 2  # the refused runs asked nothing

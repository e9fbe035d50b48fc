"""What a demanding user of the testing kit meets at its edges: a hand-edited cassette refused
when it is read (never handed to the engine); a cassette written whole or not at all; no secret
in a tool-call ID or a layer's name; the tools offered in another order said so; approval-gated
runs that replay to the same records; a retry under chaos served the response its fault
spoiled; and every helper refusing what it cannot use when it is called, not when it plays."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from capabilities.approval import Answer, ScriptedApproval
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime, tool
from effectagent.ai import (
    AuthenticationFailed,
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    RateLimited,
    ResponsePart,
    Usage,
    generate,
)
from effectagent.effect import Layer
from effectagent.testing import (
    PROBE_TOOLKIT,
    BatchSpec,
    CallSpec,
    Cassette,
    CassetteError,
    Exchange,
    FaultPlan,
    ModelFault,
    ReplayModel,
    ScriptedModel,
    Turn,
    assert_same_records,
    batches,
    canonical_records,
    cassette_of_log,
    invariant_violations,
    record,
    run_batch_sync,
    run_chaos_sync,
    with_faults,
)

from .cassettes import CANARY, agent_with, forecast, lines, run_on, scripted_weather, weather
from .test_replay import replay_fails

HEADER = {"cassette": "effectagent", "version": 1, "source": "record", "unchecked": []}
FINISH = {"type": "finish", "reason": "stop", "usage": {}}


def exchange(**fields: Any) -> dict[str, Any]:
    line = {"exchange": 1, "request": {"messages": []}, "parts": [FINISH], "end": "complete"}
    return line | fields


def partials(directory: Path) -> list[Path]:
    """The partial files of cassettes being written in ``directory``."""
    return [p for p in directory.iterdir() if p.name.endswith(".partial")]


def read(tmp_path: Path, *values: dict[str, Any]) -> Cassette:
    path = tmp_path / "edited.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in values), encoding="utf-8")
    return Cassette.read(path)


# ---- a cassette edited by hand ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (HEADER | {"unchecked": [{}]}, "the header's unchecked must list request fields"),
        (HEADER | {"unchecked": [["tools"]]}, "the header's unchecked must list request fields"),
        (HEADER | {"version": True}, r"has no valid format version \(its header has True\)"),
        (HEADER | {"version": 1.0}, r"has no valid format version \(its header has 1.0\)"),
        (HEADER | {"model": {"name": 7}}, "the header's model name is not a string"),
        (HEADER | {"model": {"native_output": "yes"}}, "native_output is not true or false"),
    ],
)
def test_a_header_edited_into_what_it_cannot_mean_is_refused(
    tmp_path: Path, header: dict[str, Any], message: str
) -> None:
    with pytest.raises(CassetteError, match=message):
        read(tmp_path, header)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            exchange(parts=[FINISH | {"reason": "done"}]),
            r"part 1 \(finish\) is malformed: its reason 'done' is none of stop, length",
        ),
        (
            exchange(parts=[{"type": "text-delta", "id": "t", "delta": 5}]),
            r"part 1 \(text-delta\)'s delta must be a string, got 5",
        ),
        (
            exchange(parts=[{"type": "tool-call", "id": 1, "name": "f", "arguments": "{}"}]),
            r"part 1 \(tool-call\)'s id must be a string, got 1",
        ),
        (
            exchange(parts=[{"type": "tool-call", "id": "c", "name": "f", "arguments": {}}]),
            r"part 1 \(tool-call\)'s arguments must be a string",
        ),
        (
            exchange(
                parts=[{"type": "native-reasoning", "provider": "p", "model": "m", "data": 1}]
            ),
            r"part 1 \(native-reasoning\)'s data must be a JSON object",
        ),
        (
            exchange(parts=[{"type": "response-metadata", "timestamp": "noon"}]),
            r"part 1 \(response-metadata\)'s timestamp must be a finite number or null",
        ),
        (
            exchange(
                end="error", error={"_tag": "RateLimited", "message": "x", "retry_after": "1"}
            ),
            "a RateLimited error's retry_after must be a finite number or null, got '1'",
        ),
        (
            exchange(end="error", error={"_tag": "ProviderError", "message": 5}),
            "a ProviderError error's message must be a string, got 5",
        ),
        (
            exchange(end="defect", error={"_tag": "KeyError", "message": ["x"]}),
            "its defect's _tag and message must be strings",
        ),
        (exchange(request={"messages": {}}), "its request's messages are not a JSON array"),
        (exchange(request={"tools": "all"}), "its request's tools are not a JSON array"),
    ],
)
def test_an_exchange_edited_into_what_the_engine_cannot_take_is_refused_naming_its_line(
    tmp_path: Path, line: dict[str, Any], message: str
) -> None:
    """Each of these was read as it was and reached the engine only on replay — a TypeError in
    the run, or a model error the engine cannot wait on — instead of the line's number."""
    with pytest.raises(CassetteError, match=f"edited.jsonl, line 2: not an exchange: {message}"):
        read(tmp_path, HEADER, line)


def test_what_a_recording_writes_still_reads_back(tmp_path: Path) -> None:
    """The checks refuse only what no recording writes: a recorded run reads back."""
    path = tmp_path / "weather.jsonl"
    run_on(record(scripted_weather().as_layer(), path))
    assert len(Cassette.read(path).exchanges) == 2


# ---- written whole or not at all ----------------------------------------------------------------


def test_recording_over_a_cassette_replaces_it_only_once_the_new_one_is_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "weather.jsonl"
    run_on(record(ScriptedModel([Turn.text("No idea.")]).as_layer(), path))
    before = lines(path)
    seen: list[Any] = []

    async def main() -> None:
        layer = record(scripted_weather().as_layer(), path) + weather.toolkit.handlers()
        async with open_runtime(layer, agents=[weather]) as runtime:
            await runtime.run(weather, "How warm is it in Oslo and Rome?")
            seen.append(lines(path))  # mid-recording: the old cassette, whole
            seen.extend(p.name for p in partials(tmp_path))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen[0] == before
    assert len(seen) == 2
    assert seen[1].startswith(".weather.jsonl.")  # the new one, beside it
    assert [p.name for p in tmp_path.iterdir()] == ["weather.jsonl"]  # moved over it
    assert len(lines(path)) == 3
    assert ReplayModel(path).cassette == Cassette.read(path)


def test_a_recording_that_never_ends_leaves_the_old_cassette_whole(tmp_path: Path) -> None:
    """A process killed while recording never closes its writer: the cassette at the path is
    the one that was there, and what was recorded waits in the partial file."""
    path = tmp_path / "weather.jsonl"
    run_on(record(ScriptedModel([Turn.text("No idea.")]).as_layer(), path))
    before = lines(path)
    layer = record(scripted_weather().as_layer(), path)

    async def main() -> None:
        # The run is recorded, and the runtime's block is not left — as a killed process
        # never leaves it.
        ran = trio.Event()
        async with trio.open_nursery() as nursery:

            async def recording() -> None:
                async with open_runtime(
                    layer + weather.toolkit.handlers(), agents=[weather]
                ) as runtime:
                    await runtime.run(weather, "How warm is it in Oslo and Rome?")
                    ran.set()
                    await trio.sleep_forever()

            nursery.start_soon(recording)
            await ran.wait()
            assert lines(path) == before
            (partial,) = partials(tmp_path)
            assert len(lines(partial)) == 3  # the header and both exchanges, flushed
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert lines(path) == before  # cancelled, not ended: still set aside
    (partial,) = partials(tmp_path)
    assert len(lines(partial)) == 3


class Broken(Exception):
    """What the test's own code raised inside the runtime's block."""


def test_a_recording_left_by_an_exception_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "weather.jsonl"
    run_on(record(ScriptedModel([Turn.text("No idea.")]).as_layer(), path))
    before = lines(path)

    async def main() -> None:
        layer = record(scripted_weather().as_layer(), path) + weather.toolkit.handlers()
        async with open_runtime(layer, agents=[weather]) as runtime:
            await runtime.run(weather, "How warm is it in Oslo and Rome?")
            raise Broken

    with pytest.raises(Broken):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert lines(path) == before
    (partial,) = partials(tmp_path)
    assert len(Cassette.read(partial).exchanges) == 2  # what was recorded, whole lines


def test_a_run_that_fails_is_still_a_recording_that_ended(tmp_path: Path) -> None:
    path = tmp_path / "failed.jsonl"
    results, _ = run_on(
        record(
            ScriptedModel(
                [
                    Turn.fail(RateLimited("no", retry_after=None)),
                    Turn.fail(AuthenticationFailed("bad key")),
                ]
            ).as_layer(),
            path,
        )
    )
    assert results[0].status == "failed"
    assert [e.end for e in Cassette.read(path).exchanges] == ["error", "error"]
    assert partials(tmp_path) == []


def test_a_cassette_path_that_is_a_directory_fails_when_the_layer_is_built(
    tmp_path: Path,
) -> None:
    with pytest.raises(BaseException) as caught:
        run_on(record(scripted_weather().as_layer(), tmp_path))
    error: BaseException = caught.value
    while isinstance(error, BaseExceptionGroup):
        (error,) = error.exceptions
    assert isinstance(error, CassetteError)
    assert "it is a directory" in str(error)


def test_cassette_write_replaces_a_file_in_one_step(tmp_path: Path) -> None:
    path = tmp_path / "copy.jsonl"
    path.write_text("not a cassette\n")
    source = tmp_path / "weather.jsonl"
    run_on(record(scripted_weather().as_layer(), source))
    Cassette.read(source).write(path)
    assert Cassette.read(path) == Cassette.read(source)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.jsonl", "weather.jsonl"]


def test_a_cassette_that_cannot_be_written_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "kept.jsonl"
    run_on(record(scripted_weather().as_layer(), path))
    before = lines(path)
    unwritable = Cassette((Exchange(1, {"messages": {"a set"}}, ()),))
    with pytest.raises(CassetteError, match=r"cannot write the cassette .*not JSON serializable"):
        unwritable.write(path)
    with pytest.raises(CassetteError, match="cannot write the cassette"):
        Cassette((), model={"name": object()}).write(path)
    assert lines(path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["kept.jsonl"]


# ---- secrets --------------------------------------------------------------------------------------


def test_a_secret_in_a_tool_call_id_reaches_no_part_of_the_cassette(tmp_path: Path) -> None:
    """The call's start part was redacted, its deltas and the call itself were not: the ID
    is the same in every part of the call — the engine's name for it."""
    path = tmp_path / "ids.jsonl"
    script = ScriptedModel(
        [Turn.tool_calls(("forecast", {"city": "Oslo"}, f"call-{CANARY}")), Turn.text("4 °C.")]
    )
    results, _ = run_on(record(script.as_layer(), path, secrets=[CANARY]), secrets=[CANARY])
    assert results[0].status == "completed"
    assert CANARY not in path.read_text()
    ids = {getattr(p, "id", None) for p in Cassette.read(path).exchanges[0].parts}
    assert ids == {"call-[REDACTED]-2", None}


def test_a_run_whose_tool_call_ids_held_a_secret_replays_to_the_same_records(
    tmp_path: Path,
) -> None:
    """The engine names a call whose ID held a secret afresh (the redacted ID and a suffix no
    call of the conversation used); a replay serves an ID without the secret, so the cassette
    holds the engine's name, and the replayed runs ask and write what the recorded ones did."""
    path = tmp_path / "ids.jsonl"
    call = ("forecast", {"city": "Oslo"}, f"call-{CANARY}")
    turns = [Turn.tool_calls(call), Turn.text("4 °C.")]
    prompts = ["How warm is Oslo?", "And now?"]
    script = ScriptedModel(turns * 2)
    _, recorded = run_on(
        record(script.as_layer(), path, secrets=[CANARY]), prompts=prompts, secrets=[CANARY]
    )
    assert CANARY not in path.read_text()
    model = ReplayModel(path, secrets=[CANARY])
    results, replayed = run_on(model.as_layer(), prompts=prompts, secrets=[CANARY])
    assert [r.status for r in results] == ["completed", "completed"]
    model.check()
    assert_same_records(recorded, replayed)


def test_a_secret_in_the_model_layers_name_is_not_in_the_header(tmp_path: Path) -> None:
    path = tmp_path / "named.jsonl"
    layer = scripted_weather().as_layer()
    named = record(layer.named(f"proxy?key={CANARY}"), path, secrets=[CANARY])
    run_on(named)
    assert CANARY not in path.read_text()
    assert Cassette.read(path).model["name"] == "proxy?key=[REDACTED]"


# ---- the divergence says what changed -------------------------------------------------------------


@tool(readonly=True)
async def humidity(city: str) -> float:
    """Today's humidity in a city.

    Args:
        city: The city's name.
    """
    return 0.5


def test_the_same_tools_in_another_order_are_said_to_be_so(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    run_on(record(scripted_weather().as_layer(), path), agent=agent_with(forecast, humidity))
    error = replay_fails(ReplayModel.layer(path), agent=agent_with(humidity, forecast))
    assert (
        str(error)
        .splitlines()[0]
        .endswith(
            "the tools offered differ: the same tools in another order ('humidity', 'forecast'; "
            "recorded: 'forecast', 'humidity')"
        )
    )
    assert error.path == "tools[0].name"


def test_a_tool_offered_instead_of_another_names_both(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    run_on(record(scripted_weather().as_layer(), path))
    error = replay_fails(ReplayModel.layer(path), agent=agent_with(humidity))
    assert (
        str(error)
        .splitlines()[0]
        .endswith(
            "the tools offered differ: tool 'forecast' was offered then, not now; "
            "tool 'humidity' is offered now, not then"
        )
    )


# ---- helpers refuse what they cannot use, when called ---------------------------------------------

ONE_CALL = BatchSpec((CallSpec("c1", "probe_echo", '{"text": "a"}'),))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"toolkit": [forecast]}, TypeError, "toolkit must be a Toolkit"),
        ({"handlers": [forecast]}, TypeError, "handlers= takes a mapping of tools"),
        ({"handlers": {1: forecast.handler}}, TypeError, "handlers= keys are tools or their names"),
        (
            {"handlers": {"probe_echo": "echo"}},
            TypeError,
            "gives 'probe_echo' a str, not a handler",
        ),
        ({"services": "approval"}, TypeError, "services must be a Layer, got str"),
    ],
)
def test_run_batch_refuses_arguments_it_cannot_use(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        run_batch_sync(ONE_CALL, tool_concurrency=1, **options)


def test_run_chaos_and_with_faults_refuse_arguments_they_cannot_use() -> None:
    layer = scripted_weather().as_layer() + weather.toolkit.handlers()
    with pytest.raises(TypeError, match="agent must be an Agent, got str"):
        run_chaos_sync("weather", layer, FaultPlan())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="layer must be a Layer"):
        run_chaos_sync(weather, [layer], FaultPlan())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="plan must be a FaultPlan"):
        run_chaos_sync(weather, layer, ())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="toolkit must be a Toolkit or None"):
        with_faults(layer, FaultPlan(), [forecast])  # type: ignore[arg-type]


def test_batches_of_the_probe_toolkit_given_by_name_draw_like_the_default() -> None:
    @settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
    @given(batch=batches(PROBE_TOOLKIT))
    def property_holds(batch: BatchSpec) -> None:
        assert batch.toolkit is PROBE_TOOLKIT
        report = run_batch_sync(batch, tool_concurrency=2)
        assert report.unexpected() == ()

    property_holds()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"arguments": {"probe_echo": {"text": "a"}}}, "gives 'probe_echo' a dict, not a strategy"),
        ({"failures": {"probe_echo": "quota"}}, "gives 'probe_echo' a str, not a strategy"),
        ({"arguments": [("probe_echo", st.just({"text": "a"}))]}, "takes a mapping of tool names"),
    ],
)
def test_batches_refuses_what_is_not_a_strategy_when_it_is_made(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        batches(**options)


def test_a_chaos_run_given_what_it_needs_still_runs() -> None:
    """The chaos runner's refusals come before anything runs: a good call still runs."""
    agent = Agent("weather", "Answer.", AgentPolicy(max_duration=60), Toolkit(forecast))
    layer = scripted_weather().as_layer() + agent.toolkit.handlers()
    report = run_chaos_sync(agent, layer, FaultPlan(), prompt="How warm?")
    report.assert_invariants()
    assert report.completed


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: Turn.fail("quota"),  # type: ignore[arg-type]
            TypeError,
            "Turn.error must be an exception to raise",
        ),
        (
            lambda: Turn.fail(RateLimited),  # type: ignore[arg-type]
            TypeError,
            r"give an instance: RateLimited\(...\)",
        ),
        (
            lambda: Turn.text("hi").with_inspection(5),  # type: ignore[arg-type]
            TypeError,
            "Turn.inspect must be a function",
        ),
        (
            lambda: Turn(hang="yes"),  # type: ignore[arg-type]
            TypeError,
            "Turn.hang must be a bool, got 'yes'",
        ),
        (
            lambda: Turn.text("hi", finish="done"),  # type: ignore[arg-type]
            ValueError,
            "finish must be one of stop, length",
        ),
        (
            lambda: Turn.tool_calls(("forecast", {}), truncate_last=1),  # type: ignore[arg-type]
            TypeError,
            "truncate_last must be a bool, got 1",
        ),
    ],
)
def test_a_turn_that_would_fail_only_when_played_is_refused_when_made(
    make: Any, error: type[Exception], message: str
) -> None:
    """Each of these was taken and failed the run that played it, as a TypeError the engine
    reported as a defect of the model (or a finish reason nothing knows)."""
    with pytest.raises(error, match=message):
        make()


def test_a_turn_may_still_script_a_model_that_crashes() -> None:
    scripted = ScriptedModel([Turn.fail(RuntimeError("the SDK broke"))])
    results, _ = run_on(scripted.as_layer())
    assert results[0].status == "failed"
    assert "the SDK broke" in str(results[0].error)


# ---- chaos keeps the script in step --------------------------------------------------------------


def test_a_spoiled_response_goes_whole_to_a_retry_whose_request_changed() -> None:
    """With a status note, the retry's request tells less time left than the first: the
    response the fault spoiled was matched by request, dropped, and the script ran out."""
    agent = Agent(
        "weather", "Answer.", AgentPolicy(max_duration=300, status_note=True), Toolkit(forecast)
    )
    layer = ScriptedModel.layer(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}, "call_1")),
            Turn.text("4 °C in Oslo."),
        ],
        check=True,
    )
    plan = FaultPlan(model=(None, ModelFault("cut", after_parts=2)))
    report = run_chaos_sync(agent, layer + agent.toolkit.handlers(), plan, prompt="How warm?")
    report.assert_invariants()
    assert report.completed
    assert report.result is not None
    assert report.result.text == "4 °C in Oslo."


def test_export_and_replay_refuse_what_is_not_a_log_or_a_cassette() -> None:
    with pytest.raises(TypeError, match="entries must be a conversation's log entries, got str"):
        cassette_of_log("conv_1", instructions="Answer.")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"entries\[0\] must be a LogEntry"):
        cassette_of_log([{"record": "x"}], instructions="Answer.")  # type: ignore[list-item]
    with pytest.raises(TypeError, match="instructions must be the agent's system prompt"):
        cassette_of_log([], instructions=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model must be a mapping"):
        cassette_of_log([], instructions="Answer.", model=["gpt"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ReplayModel takes a Cassette or a cassette's path"):
        ReplayModel(3)  # type: ignore[arg-type]


def test_a_cassette_cut_short_in_its_header_says_so(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_text('{"cassette": "effectagent", "vers', encoding="utf-8")
    with pytest.raises(
        CassetteError, match=r"its header line is not JSON \(.*\); was the file cut"
    ):
        Cassette.read(path)


# ---- the same run, the same records ---------------------------------------------------------------


@attrs.frozen
class Transfer:
    account: str


async def handle_transfer(params: Transfer, call: ToolCallContext) -> None:
    return None


transfer = Tool(
    "transfer",
    "Move money to an account.",
    parameters=Transfer,
    needs_approval=True,
    targets=lambda params: [f"account:{params.account}"],
    timeout=30.0,
    handler=handle_transfer,
)


def test_two_runs_of_an_approved_call_write_the_same_records() -> None:
    """Each runtime keys its approval digests with a key of its own: the digest differed from
    run to run, so a replay of any approval-gated run wrote 'different' records."""
    bank = Agent("bank", "Move money.", AgentPolicy(max_duration=60), Toolkit(transfer))

    def run() -> list[Any]:
        script = [Turn.tool_calls(("transfer", {"account": "savings"}, "c1")), Turn.text("Done.")]
        approver = ScriptedApproval([Answer.approve("own account")])
        layer = ScriptedModel.layer(script) + approver.layer()
        _, entries = run_on(layer, bank, ["Move it to savings."])
        return entries

    first, second = run(), run()
    assert_same_records(first, second)
    records = canonical_records(first)
    digests = [
        part["arguments_digest"]
        for record in records
        for part in (record.get("request"), record.get("decision"))
        if isinstance(part, dict)
    ]
    assert digests == ["<digest-1>", "<digest-1>"]  # the request and its decision: one digest


def test_recording_through_a_symbolic_link_replaces_its_target(tmp_path: Path) -> None:
    target = tmp_path / "store" / "weather.jsonl"
    target.parent.mkdir()
    run_on(record(ScriptedModel([Turn.text("No idea.")]).as_layer(), target))
    link = tmp_path / "weather.jsonl"
    link.symlink_to(target)
    run_on(record(scripted_weather().as_layer(), link))
    assert link.is_symlink()
    assert len(lines(target)) == 3


def test_the_invariant_checker_refuses_what_is_not_a_policy_or_a_time() -> None:
    with pytest.raises(TypeError, match="policy must be the agent's AgentPolicy, got dict"):
        invariant_violations([], [], policy={"max_turns": 3}, elapsed=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="elapsed must be a finite number of seconds"):
        invariant_violations([], [], policy=weather.policy, elapsed=float("nan"))


def test_nan_in_a_line_is_not_json(tmp_path: Path) -> None:
    """Python's reader takes NaN; a request holding it never equals itself, so every replay of
    the line diverged, naming a value that looks the same on both sides."""
    path = tmp_path / "nan.jsonl"
    line = json.dumps(exchange(request={"messages": [], "metadata": {"t": float("nan")}}))
    path.write_text(json.dumps(HEADER) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(CassetteError, match=r"nan.jsonl, line 2: not JSON \(NaN is not JSON\)"):
        Cassette.read(path)


def test_a_redactor_that_is_not_one_is_refused_when_the_layer_is_made(tmp_path: Path) -> None:
    """It was taken, and every exchange failed as the cassette was written (no ``active``)."""
    with pytest.raises(TypeError, match="redactor= takes a Redactor"):
        record(scripted_weather().as_layer(), tmp_path / "x.jsonl", redactor=[CANARY])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="redactor= takes a Redactor"):
        ReplayModel.layer(tmp_path / "x.jsonl", redactor="secret")  # type: ignore[arg-type]


def test_secrets_given_once_redact_every_runtime_the_replay_layer_builds(tmp_path: Path) -> None:
    path = tmp_path / "secret.jsonl"
    prompt = f"My key is {CANARY}. How warm is it in Oslo and Rome?"
    record_layer = record(scripted_weather().as_layer(), path, secrets=[CANARY])
    run_on(record_layer, prompts=[prompt], secrets=[CANARY])
    # The runtime has no secrets here: the replay redacts each request itself before comparing.
    layer = ReplayModel.layer(path, secrets=iter([CANARY]))  # type: ignore[arg-type]
    for _ in range(2):  # a generator of secrets was used up by the first model it made
        results, _ = run_on(layer, prompts=[prompt])
        assert results[0].status == "completed"


# ---- what a line may hold -------------------------------------------------------------------------


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_run_whose_text_holds_a_unicode_line_separator_reads_back(
    tmp_path: Path, separator: str
) -> None:
    """The reader split lines wherever ``str.splitlines`` does — inside a JSON string too — so
    a prompt or an answer holding one of these wrote a cassette that could not be read."""
    path = tmp_path / "lines.jsonl"
    answer = f"4 °C in Oslo,{separator}17.5 °C in Rome."
    scripted = ScriptedModel([scripted_weather().unconsumed[0], Turn.text(answer)])
    results, recorded = run_on(record(scripted.as_layer(), path), prompts=[f"Oslo{separator}Rome?"])
    assert results[0].text == answer
    assert len(lines(path)) == 3  # written as escapes: one exchange a line for any reader
    replayed = ReplayModel.layer(path)
    results, again = run_on(replayed, prompts=[f"Oslo{separator}Rome?"])
    assert results[0].text == answer
    assert_same_records(recorded, again)


def test_a_line_holding_a_separator_as_it_is_and_crlf_endings_read(tmp_path: Path) -> None:
    path = tmp_path / "raw.jsonl"
    line = json.dumps(exchange(request={"messages": ["a\u2028b\x85c"]}), ensure_ascii=False)
    path.write_bytes((json.dumps(HEADER) + "\r\n" + line + "\r\n").encode())
    (read_back,) = Cassette.read(path).exchanges
    assert read_back.request == {"messages": ["a\u2028b\x85c"]}


# ---- a recorded model is priced as itself ---------------------------------------------------------


class PricedModel:
    """A scripted model that names itself by a model string the default price table has."""

    model_name = "openai:gpt-4.1"

    def __init__(self) -> None:
        self.script = ScriptedModel([Turn.text("4 °C.", usage=Usage.of(1000, 100))])

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        return self.script.stream(request)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


def test_a_recorded_replayed_or_chaotic_model_is_priced_as_the_model_it_stands_for(
    tmp_path: Path,
) -> None:
    """The wrappers did not say the model's name: a cost budget refused every recorded run
    (NoPriceForModel), and the recorded run's records lost the cost the same run had unrecorded."""
    budgeted = Agent("weather", "Answer.", AgentPolicy(max_duration=60, cost_budget="1.00"))
    path = tmp_path / "priced.jsonl"

    def model() -> Layer:
        return Layer.succeed(LanguageModelService, PricedModel())

    plain, unrecorded = run_on(model(), budgeted)
    recorded_results, recorded = run_on(record(model(), path), budgeted)
    replayed_results, replayed = run_on(ReplayModel.layer(path), budgeted)
    for results in (plain, recorded_results, replayed_results):
        assert results[0].status == "completed"
        assert results[0].usage.cost_micros == plain[0].usage.cost_micros > 0
    assert_same_records(unrecorded, recorded)
    assert_same_records(recorded, replayed)
    assert Cassette.read(path).model["model_name"] == "openai:gpt-4.1"
    report = run_chaos_sync(budgeted, model(), FaultPlan(), prompt="How warm?")
    assert report.completed


def test_a_first_recording_left_by_an_exception_keeps_what_it_recorded(tmp_path: Path) -> None:
    """No cassette to keep whole: what was recorded before the test's own code failed is put
    at the path, whole lines only."""
    path = tmp_path / "first.jsonl"

    async def main() -> None:
        layer = record(scripted_weather().as_layer(), path) + weather.toolkit.handlers()
        async with open_runtime(layer, agents=[weather]) as runtime:
            await runtime.run(weather, "How warm is it in Oslo and Rome?")
            raise Broken

    with pytest.raises(Broken):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(Cassette.read(path).exchanges) == 2
    assert partials(tmp_path) == []


_SECRET_IN_ID = "s3cr3t-id-77"


@settings(max_examples=200)
@given(
    ids=st.lists(
        st.sampled_from(
            [
                "a",
                "b",
                f"call-{_SECRET_IN_ID}",
                f"x-{_SECRET_IN_ID}",
                "call-[REDACTED]",
                "call-[REDACTED]-2",
                "x-[REDACTED]",
            ]
        ),
        min_size=1,
        max_size=5,
        unique=True,
    ),
    used=st.sets(st.sampled_from(["a", "call-[REDACTED]", "call-[REDACTED]-2", "x-[REDACTED]-3"])),
)
def test_the_recorders_name_for_a_call_is_the_one_the_engine_gives_it(
    ids: list[str], used: set[str]
) -> None:
    """The recorder repeats the engine's renaming rule (the testing kit may not import the
    engine's private module): a replay of what it writes, which holds no secret, must end with the
    IDs the recorded run's engine gave — for every mix of renamed, colliding and kept IDs."""
    from effectagent.ai import FinishPart, ModelResponse, ToolCallPart, Usage
    from effectagent.core import SecretRedactor
    from effectagent.engine._model_step import _with_fresh_identities
    from effectagent.testing._record import _engine_ids

    def final_ids(call_ids: list[str], redactor: SecretRedactor | None) -> list[str]:
        calls = tuple(ToolCallPart(i, "t", "{}") for i in call_ids)
        response = ModelResponse(calls, calls, (), "tool-calls", Usage.of(1, 1))
        renamed = _with_fresh_identities(response, redactor, set(used))
        return [call.id for call in renamed.tool_calls]

    redactor = SecretRedactor([_SECRET_IN_ID])
    parts = [ToolCallPart(i, "t", "{}") for i in ids] + [FinishPart("tool-calls", Usage.of(1, 1))]
    written = [p.id for p in _engine_ids(parts, redactor, set(used)) if isinstance(p, ToolCallPart)]
    served = [redactor.redact_text(i) for i in written]  # what the cassette holds
    assert final_ids(served, None) == final_ids(ids, redactor)

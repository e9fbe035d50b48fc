"""A Code Mode pass stopped by a limit still shows the model what its program printed before —
as a thrown error does: the lines come along in the ``CodeModeFailed`` the model reads, whatever
limit it was (``timeout``, ``too-many-calls``, ``memory``, ``call-too-large``, ``too-deep``,
``result-too-large``), under the one egress budget of the pass and redacted like everything the
pass gives back.

Each pass's other limits are far away, so that only the one under test can end it, whatever the
machine's load."""

from __future__ import annotations

from typing import Any

import pytest

from capabilities.code_mode import CodeModeLimits, code_mode
from capabilities.code_mode._egress import json_size
from effectagent.core import REDACTED
from sandbox import DenoCodeExecutor
from sandbox._isolation import probe_host
from tests.sandbox.test_code_deno import nested
from tests.sandbox.test_code_fixtures import WorkloadTracker

from .scenario import add, run_program
from .test_runs import failure_of

CANARY = "canary-printed-5c2e81"

#: Far beyond any pass here.
FAR: dict[str, Any] = {"wall_clock_seconds": 600.0, "cpu_seconds": 300}

PRINT = 'console.log("made it this far"); console.warn("then stopped");'
PRINTED = ["made it this far", "[warn] then stopped"]


@pytest.mark.parametrize(
    ("kind", "body", "limits"),
    [
        ("timeout", "await new Promise(() => {});", {"wall_clock_seconds": 1.0}),
        ("timeout", "for (;;) {}", {"cpu_seconds": 1}),
        (
            "too-many-calls",
            "for (let i = 0; i < 3; i++) await math.add({ a: i, b: i });",
            {"max_calls": 2},
        ),
        (
            "call-too-large",
            "await math.add({ a: 1, b: 2, pad: 'x'.repeat(1000) });",
            {"call_argument_bytes": 100},
        ),
        ("too-deep", f"await math.add({nested(100)});", {}),
        ("result-too-large", "return 'x'.repeat(5000);", {"egress_bytes": 1024}),
    ],
    ids=["wall-clock", "cpu", "too-many-calls", "call-too-large", "too-deep", "result-too-large"],
)
async def test_a_pass_stopped_by_a_limit_shows_the_lines_printed_before(
    executor: DenoCodeExecutor,
    tracker: WorkloadTracker,
    kind: str,
    body: str,
    limits: dict[str, Any],
) -> None:
    code = code_mode(
        {"math": [add]}, executor="service", limits=CodeModeLimits(**{**FAR, **limits})
    )
    program = f"async () => {{ {PRINT} {body} }}"
    envelope = failure_of(await run_program(code, program, executor=executor))
    assert envelope["kind"] == kind
    assert envelope["logs"] == PRINTED
    assert envelope["logs_truncated"] is False


async def test_a_pass_stopped_by_the_memory_limit_shows_its_lines(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    if probe_host().cgroup_memory is None:
        pytest.skip("no writable cgroup memory controller on this host")
    limits = CodeModeLimits(memory_bytes=256 << 20, **FAR)
    code = code_mode({"math": [add]}, executor="service", limits=limits)
    bomb = "const a = []; for (;;) a.push(new Uint8Array(16 * 1024 * 1024).fill(1));"
    envelope = failure_of(
        await run_program(code, f"async () => {{ {PRINT} {bomb} }}", executor=executor)
    )
    assert envelope["kind"] == "memory"
    assert envelope["logs"] == PRINTED


async def test_the_lines_of_a_stopped_pass_share_the_egress_budget_and_are_redacted(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    limits = CodeModeLimits(egress_bytes=1024, max_calls=1, **FAR)
    code = code_mode({"math": [add]}, executor="service", limits=limits)
    program = f"""async () => {{
      console.log("the token is {CANARY}");
      for (let i = 0; i < 200; i++) console.log("line " + i + " " + "x".repeat(40));
      await math.add({{ a: 1, b: 1 }});
      await math.add({{ a: 2, b: 2 }});
    }}"""
    ran = await run_program(code, program, executor=executor, secrets=[CANARY])
    envelope = failure_of(ran)
    assert envelope["kind"] == "too-many-calls"
    assert envelope["logs"][0] == f"the token is {REDACTED}"
    assert envelope["logs_truncated"] is True
    assert len(envelope["logs"]) > 5  # as many as fit
    assert json_size(envelope) <= 1024 + len(REDACTED)  # measured before redaction
    assert CANARY not in ran.everything()

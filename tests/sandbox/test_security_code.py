"""Security suite of the Deno CodeExecutor: hostile programs are contained with a typed error.

Each probe runs a program that tries to escape or exhaust its pass — read or write host files,
reach the network, start processes, exhaust memory, CPU, output or the host-call budget, escape the
import policy, reach permission-gated APIs, or tamper with the harness and its protocol — and
asserts (1) the precise typed outcome, (2) that the secret or side effect did not happen, and
(3) through the ``tracker`` fixture, that nothing of the pass is left: every process of the
workload gone, its cgroups and temp dirs removed.

Every probe runs twice: on a bare executor, whose ``execute`` releases the workload before it
returns, and on a pooled one (a warm pool and a reaper in a scope), whose passes return once the
workload is SIGKILLed — there (3) is checked after the executor is closed, which must wait for
every release. The tracker is set up before the executor and torn down after it, and learns what
the executor holds only through its public ``on_acquire`` hook and ``owned()``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from sandbox import (
    CodeExecutionError,
    CodeExecutionLimits,
    CodeTimeout,
    DenoCodeExecutor,
    ExecutorCrashed,
    HostCallLimitExceeded,
    HostCallTooLarge,
    InvalidProgram,
    Isolation,
    LogLine,
    MemoryLimitExceeded,
    OutputLimitExceeded,
    ProgramThrew,
    ResultTooLarge,
    open_deno_executor,
)
from sandbox._code import CodeLimitNotEnforceable
from sandbox._isolation import probe_host
from sandbox._posture import LIMIT_MEMORY, LIMIT_PROCESSES

from .test_code_fixtures import WARM_LIMITS, Host, WorkloadTracker, request, tracker

__all__ = ["executor", "tracker"]  # fixtures used by name

SECRET = "effectagent-secret-7f3a"


@pytest.fixture(params=["bare", "pooled"])
async def executor(
    request: pytest.FixtureRequest, tracker: WorkloadTracker
) -> AsyncIterator[DenoCodeExecutor]:
    """A bare executor, or one with a ready warm workload and a reaper (closed after the test)."""
    if request.param == "bare":
        yield DenoCodeExecutor(on_acquire=tracker.record)
        return
    async with open_deno_executor(
        warm=1, warm_limits=WARM_LIMITS, on_acquire=tracker.record
    ) as pooled:
        await pooled.settle()
        tracker.sample(pooled)
        yield pooled


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    """A host file holding :data:`SECRET`, outside anything the sandbox should see."""
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


async def outcome(executor: DenoCodeExecutor, source: str, *names: str, **limits: object) -> str:
    """The pass's value or error, rendered as text (so a leak anywhere in it is visible)."""
    try:
        result = await executor.execute(request(source, *names, **limits), Host())
    except CodeExecutionError as error:
        return repr(error)
    return repr(result.value) + repr(result.logs)


# ---- host files ---------------------------------------------------------------------------------


async def test_reading_a_host_file_through_the_file_api_is_denied(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, secret_file: Path
) -> None:
    for path in ("/etc/passwd", str(secret_file)):
        with pytest.raises(ProgramThrew) as info:
            await executor.execute(request(f"async () => Deno.readTextFile({str(path)!r})"), Host())
        assert info.value.name == "NotCapable"


@pytest.mark.parametrize("target", ["/etc/passwd", "SECRET", "/work", "/proc/self/environ"])
async def test_a_text_import_cannot_read_host_files(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, secret_file: Path, target: str
) -> None:
    path = str(secret_file) if target == "SECRET" else target
    source = f"""async () => {{
        const m = await import("file://{path}", {{with: {{type: "text"}}}});
        return m.default;
    }}"""
    text = await outcome(executor, source)
    assert text.startswith("ProgramThrew(")
    assert SECRET not in text
    assert "root:x:0:0" not in text


async def test_the_sandbox_sees_only_the_runtime(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # Files any Debian host has: none of them exists inside the sandbox.
    probes = ["/etc/hostname", "/usr/bin/env", "/bin/sh", "/proc/version", "/work/main/README.md"]
    source = f"""async () => {{
        const seen = [];
        for (const path of {probes!r}) {{
            try {{ await import("file://" + path, {{with: {{type: "text"}}}}); seen.push(path) }}
            catch {{}}
        }}
        return seen;
    }}"""
    result = await executor.execute(request(source), Host())
    assert result.value == []


async def test_the_unisolated_executor_is_labelled_and_rests_on_deno_permissions_alone(
    tracker: WorkloadTracker, secret_file: Path
) -> None:
    unisolated = DenoCodeExecutor(isolation="none", on_acquire=tracker.record)
    posture = unisolated.implementation
    assert posture.isolation is Isolation.UNISOLATED
    assert not posture.is_security_boundary
    assert {"filesystem_isolation", "network_isolation"} <= posture.unenforced_limits
    # Without bubblewrap the secret is one Deno permission check away: the check holds for a
    # program-made import, but nothing else stands behind it.
    source = f"""async () => {{
        const m = await import("file://{secret_file}", {{with: {{type: "text"}}}});
        return m.default;
    }}"""
    with pytest.raises(ProgramThrew) as info:
        await unisolated.execute(request(source), Host())
    assert info.value.name == "TypeError"
    assert "read access" in info.value.message
    assert SECRET not in repr(info.value)
    assert tracker.spawned == 1
    assert len(tracker.acquired[0].paths) == 1  # its temp dir (HOME), removed with it


async def test_writing_a_file_is_denied(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, tmp_path: Path
) -> None:
    target = tmp_path / "written.txt"
    with pytest.raises(ProgramThrew) as info:
        await executor.execute(
            request(f"async () => Deno.writeTextFile({str(target)!r}, 'pwned')"), Host()
        )
    assert info.value.name == "NotCapable"
    assert not target.exists()


# ---- network, processes, environment ------------------------------------------------------------


async def test_no_network_connection_reaches_the_host(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    source = f"""async () => {{
        const errors = [];
        try {{ await fetch("http://127.0.0.1:{port}/") }} catch (e) {{ errors.push(e.name) }}
        try {{ await Deno.connect({{hostname: "127.0.0.1", port: {port}}}) }}
        catch (e) {{ errors.push(e.name) }}
        try {{ await fetch("https://example.com/") }} catch (e) {{ errors.push(e.name) }}
        return errors;
    }}"""
    try:
        result = await executor.execute(request(source), Host())
        assert result.value == ["NotCapable", "NotCapable", "NotCapable"]
        with pytest.raises(BlockingIOError):  # a connection made during the pass would be queued
            listener.accept()
    finally:
        listener.close()


async def test_starting_a_process_is_denied(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async () => {
        const names = [];
        for (const start of [
            () => new Deno.Command("/bin/sh", {args: ["-c", "true"]}).spawn(),
            () => new Deno.Command("/effectagent/deno", {args: ["--version"]}).outputSync(),
        ]) {
            try { start(); names.push("started") } catch (e) { names.push(e.name) }
        }
        return names;
    }"""
    result = await executor.execute(request(source), Host())
    assert result.value == ["NotCapable", "NotCapable"]


async def test_permission_gated_apis_are_denied_without_prompting(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async () => {
        const out = {};
        const probes = {
            env: () => Deno.env.get("HOME"),
            envAll: () => Deno.env.toObject(),
            hostname: () => Deno.hostname(),
            memory: () => Deno.systemMemoryInfo(),
            listen: () => Deno.listen({port: 0}),
            readDir: () => Array.from(Deno.readDirSync("/")),
            ffi: () => Deno.dlopen("/lib/x86_64-linux-gnu/libc.so.6", {}),
        };
        for (const [name, probe] of Object.entries(probes)) {
            try { probe(); out[name] = "allowed" } catch (e) { out[name] = e.name }
        }
        out.request = (await Deno.permissions.request({name: "read"})).state;
        out.cwd = Deno.cwd();
        return out;
    }"""
    result = await executor.execute(request(source), Host())
    assert isinstance(result.value, dict)
    denied = {name: state for name, state in result.value.items() if name not in ("request", "cwd")}
    assert set(denied.values()) == {"NotCapable"}, denied
    assert result.value["request"] == "denied"
    assert result.value["cwd"] == "/tmp"  # the sandbox's own tmpfs, nothing of the host


NODE_PROBES = {
    "typeof process": "typeof process",
    "process.env": "process.env.HOME",
    "process.pid": "typeof process.pid",
    "process.exit": "process.exit(0)",
    "node:os": '(await import("node:os")).homedir()',
    "node:process": '(await import("node:process")).default.env.PATH',
    "Deno.execPath()": "Deno.execPath()",
}


async def test_node_style_code_gets_javascript_errors_never_a_crash(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # With /proc hidden, Deno could not find its own binary and panicked on each of these.
    probes = ",\n".join(
        f"[{name!r}, async () => String({expression})]" for name, expression in NODE_PROBES.items()
    )
    source = f"""async () => {{
        const out = {{}};
        for (const [name, probe] of [{probes}]) {{
            try {{ out[name] = ["ok", await probe()] }}
            catch (e) {{ out[name] = [e.name, String(e.message).slice(0, 200)] }}
        }}
        return out;
    }}"""
    result = await executor.execute(request(source), Host())
    assert isinstance(result.value, dict)
    assert set(result.value) == set(NODE_PROBES)
    host_binary = executor.spawn_config(CodeExecutionLimits()).deno
    for name, outcome in result.value.items():
        assert isinstance(outcome, list)
        kind, detail = outcome
        assert host_binary not in str(detail)
        assert os.path.dirname(host_binary) not in str(detail)
        if kind == "ok":
            assert detail in ("object", "number", "/effectagent/deno"), (name, detail)
        else:
            assert kind in ("NotCapable", "TypeError"), (name, outcome)
    assert result.value["typeof process"] == ["ok", "object"]
    assert result.value["process.env"] == [
        "NotCapable",
        'Requires env access to "HOME", run again with the --allow-env flag',
    ]


async def test_node_style_writes_to_stdout_are_captured_not_a_protocol_breach(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async () => {
        process.stdout.write("to stdout\\n");
        process.stderr.write(new TextEncoder().encode("to stderr"));
        return "done";
    }"""
    result = await executor.execute(request(source), Host())
    assert result.value == "done"
    assert [(line.level, line.text) for line in result.logs] == [
        ("log", "to stdout"),
        ("error", "to stderr"),
    ]


@pytest.mark.parametrize(
    "specifier",
    [
        "npm:left-pad@1.3.0",
        "jsr:@std/path@1",
        "https://deno.land/std@0.224.0/path/mod.ts",
        "file:///effectagent/missing.js",
        "node:child_process",
    ],
)
async def test_imports_cannot_fetch_or_reach_the_host(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, specifier: str
) -> None:
    source = f"""async () => {{
        const m = await import({specifier!r});
        return typeof m.spawn === "function" ? m.spawn("/bin/sh").pid : Object.keys(m);
    }}"""
    started = trio.current_time()
    with pytest.raises((ProgramThrew, ExecutorCrashed)):
        await executor.execute(request(source), Host())
    assert trio.current_time() - started < 2.5  # refused locally, not after a download attempt


# ---- resource exhaustion ------------------------------------------------------------------------

_MEMORY = 256 * 1024 * 1024


@pytest.mark.parametrize(
    "bomb",
    [
        "const a = []; for (;;) a.push(new Array(1e6).fill(1.5));",
        "const a = []; for (;;) a.push(new Uint8Array(16 * 1024 * 1024).fill(1));",
    ],
    ids=["heap", "array-buffers"],
)
async def test_memory_bombs_are_contained_by_the_memory_limit(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, bomb: str
) -> None:
    source = f"async () => {{ {bomb} }}"
    if probe_host().cgroup_memory is None:
        spawned = tracker.spawned  # the warm workload of a pooled executor
        with pytest.raises(CodeLimitNotEnforceable):
            await executor.execute(request(source, memory_bytes=_MEMORY), Host())
        assert tracker.spawned == spawned
        return
    assert LIMIT_MEMORY in executor.implementation.enforced_limits
    with pytest.raises(MemoryLimitExceeded) as info:
        await executor.execute(
            request(source, memory_bytes=_MEMORY, wall_clock_seconds=3, cpu_seconds=3), Host()
        )
    assert info.value.limit == _MEMORY


async def test_an_infinite_loop_is_killed(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    with pytest.raises(CodeTimeout):
        await executor.execute(
            request("async () => { while (true) {} }", cpu_seconds=1, wall_clock_seconds=2), Host()
        )


async def test_a_console_flood_is_bounded(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async () => {
        for (let i = 0; i < 200000; i++) console.log("flood ".repeat(50));
        return 1;
    }"""
    result = await executor.execute(request(source, output_bytes=4096), Host())
    assert result.value == 1
    assert result.logs_truncated
    assert sum(len(line.text.encode()) for line in result.logs) <= 4096


async def test_a_flood_of_empty_console_lines_is_bounded_too(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # An empty line has no bytes; were it free, the host would keep one LogLine per line for as
    # long as the pass may run (millions of them).
    source = """async () => {
        for (let i = 0; i < 100000; i++) { console.log(); console.log(""); }
        return 1;
    }"""
    result = await executor.execute(request(source, output_bytes=1000), Host())
    assert result.value == 1
    assert result.logs_truncated
    assert len(result.logs) == 1000
    assert set(result.logs) == {LogLine("log", "")}


async def test_a_raw_stderr_flood_ends_the_pass(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # A Worker has its own console writing straight to the process's stderr.
    worker = "for (;;) console.error('x'.repeat(1000))"
    source = f"""async () => {{
        new Worker("data:text/javascript," + encodeURIComponent({worker!r}), {{type: "module"}});
        await new Promise(() => {{}});
    }}"""
    with pytest.raises(OutputLimitExceeded) as info:
        await executor.execute(request(source, output_bytes=10_000), Host())
    assert info.value.size > 10_000


async def test_raw_stderr_past_the_budget_ends_a_pass_that_returns_at_once(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # The result comes right after the flood: it must not win against the stderr accounting.
    source = """async () => {
        Deno[Deno.internal].core.print("x".repeat(50000) + "\\n", true);
        return 1;
    }"""
    for _ in range(3):
        with pytest.raises(OutputLimitExceeded) as info:
            await executor.execute(request(source, output_bytes=1000), Host())
        assert info.value.size == 50001


async def test_a_huge_result_is_refused_without_being_transferred(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    with pytest.raises(ResultTooLarge) as info:
        await executor.execute(request("async () => 'r'.repeat(50_000_000)"), Host())
    assert info.value.size == 50_000_002


async def test_a_host_call_flood_stops_at_the_call_limit(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    source = "async (t) => Promise.all(Array.from({length: 10000}, (_, i) => t.echo(i)))"
    with pytest.raises(HostCallLimitExceeded):
        await executor.execute(request(source, "echo", max_host_calls=50), host)
    assert len(host.calls) <= 50


async def test_an_oversized_host_call_argument_never_reaches_the_host(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    source = "async (t) => t.echo({blob: 'b'.repeat(10_000_000)})"
    with pytest.raises(HostCallTooLarge):
        await executor.execute(request(source, "echo"), host)
    assert host.calls == []


async def test_a_worker_bomb_is_contained(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async () => {
        const workers = [];
        try {
            for (let i = 0; i < 500; i++) {
                workers.push(new Worker("data:text/javascript,setInterval(() => {}, 1000)",
                                        {type: "module"}));
            }
        } catch (e) { return ["refused", e.name, workers.length] }
        return ["spawned", "", workers.length];
    }"""
    if LIMIT_PROCESSES in executor.implementation.enforced_limits:
        result = await executor.execute(request(source), Host())
        assert isinstance(result.value, list)
        refused, _, count = result.value
        assert refused == "refused"
        assert isinstance(count, int)
        assert count < CodeExecutionLimits().max_processes  # type: ignore[operator]
    else:
        with pytest.raises((MemoryLimitExceeded, CodeTimeout)):
            await executor.execute(request(source, memory_bytes=_MEMORY), Host())


# ---- tampering with the harness and the protocol ------------------------------------------------


async def test_harness_internals_are_not_reachable(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async (tools) => {
        const names = ["nonce", "sendFrame", "pending", "start", "writeAll", "stdinRead"];
        return {
            globals: names.filter((n) => {
                try { return eval(n) !== undefined } catch { return false }
            }),
            stdio: [typeof Deno.stdin, typeof Deno.stdout, typeof Deno.stderr, typeof Deno.exit],
            toolsFrozen: Object.isFrozen(tools),
            toolsProto: Object.getPrototypeOf(tools) === null,
            toolNames: Reflect.ownKeys(tools),
            consoleWritable: Object.getOwnPropertyDescriptor(globalThis, "console").writable,
        };
    }"""
    result = await executor.execute(request(source, "allowed"), Host())
    assert result.value == {
        "globals": [],
        "stdio": ["undefined", "undefined", "undefined", "undefined"],
        "toolsFrozen": True,
        "toolsProto": True,
        "toolNames": ["allowed"],
        "consoleWritable": False,
    }


async def test_tools_cannot_be_extended_or_replaced(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    source = """async (tools) => {
        "use strict";
        const errors = [];
        try { tools.secret = async () => 1 } catch (e) { errors.push(e.name) }
        try { tools.echo = async () => "forged" } catch (e) { errors.push(e.name) }
        try { Object.setPrototypeOf(tools, {secret: 1}) } catch (e) { errors.push(e.name) }
        try { console.log = () => {} } catch (e) { errors.push(e.name) }
        console.log("still captured");
        return [errors, await tools.echo("real"), typeof tools.secret];
    }"""
    result = await executor.execute(request(source, "echo"), host)
    assert result.value == [["TypeError"] * 4, "real", "undefined"]
    assert result.logs[0].text == "still captured"
    assert host.calls == [("echo", "real")]


async def test_prototype_pollution_does_not_confuse_the_protocol(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async (tools) => {
        const echo = tools.echo;
        Object.prototype.toJSON = function () { return "polluted" };
        JSON.stringify = () => "{}";
        JSON.parse = () => ({id: 999, ok: true, value: "forged"});
        Uint8Array.prototype.set = function () { throw new Error("set hijacked") };
        Object.defineProperty(Object.getPrototypeOf(Uint8Array.prototype), "length",
                              {get() { return 3 }});
        TextEncoder.prototype.encode = () => new Uint8Array([1, 2, 3]);
        Reflect.apply = () => { throw new Error("apply hijacked") };
        const value = await echo(7);
        throw new Error("after pollution: " + value);
    }"""
    with pytest.raises(ProgramThrew) as info:
        await executor.execute(request(source, "echo"), Host())
    assert info.value.message == "after pollution: 7"


@pytest.mark.parametrize("warm", [0, 1], ids=["bare", "pooled"])
async def test_typed_array_hooks_do_not_reveal_the_frame_nonce(
    tracker: WorkloadTracker, monkeypatch: pytest.MonkeyPatch, warm: int
) -> None:
    # Species and constructor hooks run whenever code derives a typed array from another one; the
    # harness never does so after the program starts, and wipes the start message it read.
    # Every 16 random bytes drawn while the executor runs is a candidate nonce (the real one too).
    candidates: list[str] = []
    draw = os.urandom

    def witnessed(size: int) -> bytes:
        value = draw(size)
        if size == 16:
            candidates.append(value.hex())
        return value

    monkeypatch.setattr(os, "urandom", witnessed)
    source = """async (tools) => {
        const seen = [];
        class Spy extends Uint8Array {
            constructor(...args) {
                super(...args);
                const all = new Uint8Array(this.buffer);  // copy now: the buffer gets reused
                const copy = new Uint8Array(Math.min(all.length, 256));
                for (let i = 0; i < copy.length; i++) copy[i] = all[i];
                seen.push(copy);
            }
        }
        Object.defineProperty(Uint8Array, Symbol.species, {get() { return Spy }});
        Uint8Array.prototype.constructor = Spy;
        await tools.echo("one");
        await tools.echo("two");
        const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
        const captured = seen.map((b) => hex(b) + "|" + new TextDecoder().decode(b));
        const before = seen.length;
        new Uint8Array(8).subarray(2);  // the hook itself works
        return [seen.length > before, captured];
    }"""
    async with open_deno_executor(
        warm=warm, warm_limits=WARM_LIMITS, on_acquire=tracker.record
    ) as executor:
        await executor.settle()
        result = await executor.execute(request(source, "echo"), Host())
    assert isinstance(result.value, list)
    assert result.value[0] is True
    assert candidates, "the nonce was drawn while the witness watched"
    shown = repr(result.value)
    leaked = [c[i : i + 8] for c in candidates for i in range(len(c) - 7) if c[i : i + 8] in shown]
    assert leaked == []


async def test_raw_bytes_on_stdout_are_rejected_as_forged_frames(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # The program's own Deno.stdout is gone, but a Worker gets a fresh one: it writes a frame
    # header with a guessed nonce claiming a result.
    worker = (
        "const body = new TextEncoder().encode('\"forged\"');"
        "const h = new Uint8Array(21 + body.length); h[16] = 82; h[20] = body.length;"
        "h.set(body, 21); Deno.stdout.writeSync(h);"
    )
    source = f"""async () => {{
        new Worker("data:text/javascript," + encodeURIComponent({worker!r}), {{type: "module"}});
        await new Promise((resolve) => setTimeout(resolve, 1000));
        return "genuine";
    }}"""
    with pytest.raises(InvalidProgram, match="did not frame"):
        await executor.execute(request(source), Host())


async def test_a_worker_stealing_host_replies_only_starves_its_own_program(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    worker = "const b = new Uint8Array(1 << 16); for (;;) await Deno.stdin.read(b);"
    source = f"""async (tools) => {{
        new Worker("data:text/javascript," + encodeURIComponent({worker!r}), {{type: "module"}});
        await new Promise((resolve) => setTimeout(resolve, 300));
        return await tools.echo("lost?");
    }}"""
    text = await outcome(executor, source, "echo", wall_clock_seconds=1.5)
    assert text in ("'lost?'()", "CodeTimeout(limit='wall_clock', seconds=1.5)")


async def test_a_program_that_kills_its_own_process_is_a_crash(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    with pytest.raises(ExecutorCrashed, match="status 137"):
        await executor.execute(
            request("async () => { Deno.kill(Deno.pid, 'SIGKILL'); return 'alive' }"), Host()
        )


async def test_replaced_promise_machinery_cannot_forge_an_outcome(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async (tools) => {
        Promise.prototype.then = function () { return this };
        Promise.resolve = () => ({then(r) { r("forged") }});
        return "genuine";
    }"""
    result = await executor.execute(request(source), Host())
    assert result.value == "genuine"


async def test_a_host_receives_only_allowed_names(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    source = """async (tools) => {
        const missing = [];
        for (const name of ["delete_everything", "__proto__", "constructor", "toString"]) {
            if (typeof tools[name] !== "function") missing.push(name);
        }
        return missing;
    }"""
    result = await executor.execute(request(source, "echo"), host)
    assert result.value == ["delete_everything", "__proto__", "constructor", "toString"]
    assert host.calls == []


async def test_lone_surrogates_reach_the_host_as_encodable_text(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # Half of an emoji, as slicing a string by code units leaves it: JSON carries it only as an
    # escape, and a Python string holding it cannot be encoded, so it would break whoever stores
    # or sends the value on. Every string the host gets is valid Unicode; a full pair survives.
    host = Host()
    source = r"""async (tools) => {
        const half = "😀".slice(0, 1);
        await tools.echo({ [half + "key"]: [half, "😀", "ok"] });
        return { [half]: "a" + half + "b", pair: "😀" };
    }"""
    result = await executor.execute(request(source, "echo"), host)
    assert result.value == {"\ufffd": "a\ufffdb", "pair": "😀"}
    assert host.calls == [("echo", {"\ufffdkey": ["\ufffd", "😀", "ok"]})]
    with pytest.raises(ProgramThrew) as info:
        await executor.execute(request(r'async () => { throw new Error("x\udc00") }'), Host())
    assert info.value.message == "x\ufffd"
    for text in (repr(result.value), str(host.calls), info.value.message):
        text.encode("utf-8")

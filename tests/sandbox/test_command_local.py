"""The unisolated local runner: ordinary behaviour, honest posture, rejections, cleanup."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from effectagent.effect import Context, Layer
from effectagent.effect._layer import open_layer
from sandbox import (
    UNLIMITED,
    ArtifactRule,
    CommandNotFound,
    Isolation,
    LimitNotEnforceable,
    LocalProcessSandbox,
    Mount,
    OutputChunk,
    ResourceUsage,
    SandboxEvent,
    SandboxExited,
    SandboxLimits,
    SandboxRequest,
    SandboxService,
    SandboxStarted,
    SecretHandle,
    SecretResolverService,
    run,
)
from sandbox._command import LIMIT_FILESYSTEM, InvalidRequest
from sandbox._posture import LIMIT_MEMORY, LIMIT_NETWORK, LIMIT_PROCESSES

from .conftest import PYTHON, assert_gone, new_marker, remember

FORK_AND_SLEEP = "import os, time; os.fork(); print('up', flush=True); time.sleep(30)"
"""Two processes saying ``up``, then sleeping; both carry the marker given as ``sys.argv[1]``."""

LOCAL = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)
"""What the local runner can run: memory and processes lifted in writing (it enforces neither)."""


def limits(**changes: Any) -> SandboxLimits:
    """:data:`LOCAL` with ``changes``."""
    return attrs.evolve(LOCAL, **changes)


async def until_up(events: AsyncIterator[SandboxEvent], count: int) -> None:
    """Consume events until ``count`` processes of a :data:`FORK_AND_SLEEP` workload said ``up``."""
    said = 0
    async for event in events:
        if isinstance(event, OutputChunk):
            said += event.data.count(b"up")
            if said >= count:
                return
    raise AssertionError("the workload ended before it was up")


@pytest.fixture(params=["pidfd", "no-pidfd"])
def exit_watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the event loop that waits on one epoll set (pipes and a pidfd), and again
    with the fallback for hosts without pidfds (one task per pipe and one waiting for the exit)."""
    if request.param == "no-pidfd":

        def unsupported(pid: int, flags: int = 0) -> int:
            raise OSError(errno.ENOSYS, "pidfd_open is not supported here")

        monkeypatch.setattr(os, "pidfd_open", unsupported)
    return str(request.param)


def req(command: str, *args: str, **kw: object) -> SandboxRequest:
    kw.setdefault("network", "host")
    kw.setdefault("limits", LOCAL)
    return SandboxRequest(command, args, **kw)  # type: ignore[arg-type]


def test_posture_is_unisolated_and_not_a_security_boundary(
    local_sandbox: LocalProcessSandbox,
) -> None:
    posture = local_sandbox.implementation
    assert posture.isolation is Isolation.UNISOLATED
    assert posture.is_security_boundary is False
    assert {LIMIT_MEMORY, LIMIT_PROCESSES, LIMIT_NETWORK, LIMIT_FILESYSTEM} <= (
        posture.unenforced_limits
    )
    assert any("NOT a security sandbox" in note for note in posture.notes)


@pytest.mark.usefixtures("exit_watch")
async def test_event_stream_order_and_result(local_sandbox: LocalProcessSandbox) -> None:
    request = req("sh", "-c", "echo out; echo err >&2; exit 7")
    async with local_sandbox.execute(request) as events:
        seen = [event async for event in events]
    assert isinstance(seen[0], SandboxStarted)
    assert seen[0].implementation == local_sandbox.implementation
    assert isinstance(seen[-2], ResourceUsage)
    assert isinstance(seen[-1], SandboxExited)
    chunks = [e for e in seen if isinstance(e, OutputChunk)]
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"out\n"
    assert b"".join(c.data for c in chunks if c.stream == "stderr") == b"err\n"
    result = seen[-1].result
    assert (result.exit_code, result.signal, result.ok) == (7, None, False)
    assert result.stdout == b"out\n"
    assert result.stderr == b"err\n"
    assert result.implementation.isolation is Isolation.UNISOLATED


@pytest.mark.usefixtures("exit_watch")
async def test_stdin_is_fed_and_closed(local_sandbox: LocalProcessSandbox) -> None:
    data = os.urandom(300_000)  # more than a pipe buffer: needs concurrent feeding and reading
    result = await run(
        local_sandbox,
        req("cat", stdin=data, limits=limits(output_bytes=1 << 20, wall_clock_seconds=5)),
    )
    assert result.ok
    assert result.stdout == data
    empty = await run(local_sandbox, req("cat", stdin=b""))
    assert empty.ok
    assert empty.stdout == b""


async def test_only_allowlisted_env_passes(
    local_sandbox: LocalProcessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EA_HOST_ONLY", "hidden")
    monkeypatch.setenv("EA_PASSED", "from-host")
    request = req(
        "env", env_allowlist=("EA_PASSED", "EA_EXPLICIT"), env={"EA_EXPLICIT": "explicit"}
    )
    result = await run(local_sandbox, request)
    lines = set(result.stdout.decode().splitlines())
    assert "EA_PASSED=from-host" in lines
    assert "EA_EXPLICIT=explicit" in lines
    assert not any(line.startswith("EA_HOST_ONLY") for line in lines)
    assert {line.split("=")[0] for line in lines} == {"PATH", "EA_PASSED", "EA_EXPLICIT"}


async def test_cwd_defaults_to_a_temp_workdir_that_is_removed(
    local_sandbox: LocalProcessSandbox,
) -> None:
    execution = local_sandbox.execute(req("pwd"))
    async with execution as events:
        owned = tuple(execution.owned().paths)
        assert len(owned) == 1
        assert await trio.Path(owned[0]).is_dir()
        output = b"".join([e.data async for e in events if isinstance(e, OutputChunk)])
    assert output.decode().strip() == owned[0]
    assert not await trio.Path(owned[0]).exists()


async def test_cwd_with_identity_mount_and_artifacts(
    local_sandbox: LocalProcessSandbox, tmp_path: Path
) -> None:
    here = str(tmp_path)
    script = "printf abc > a.txt; printf 0123456789 > b.txt; mkdir d; echo nested > d/c.txt"
    request = req(
        "sh",
        "-c",
        script,
        cwd=here,
        mounts=(Mount(here, here, "rw"),),
        artifacts=(ArtifactRule("*.txt", root=here, max_bytes=4, max_count=5),),
    )
    result = await run(local_sandbox, request)
    assert result.ok
    by_name = {os.path.basename(a.path): a for a in result.artifacts}
    assert set(by_name) == {"a.txt", "b.txt"}
    assert by_name["a.txt"].content == b"abc"
    assert not by_name["a.txt"].truncated
    assert by_name["b.txt"].content == b"0123"
    assert by_name["b.txt"].truncated
    assert by_name["b.txt"].size == 10
    assert (tmp_path / "a.txt").exists()  # the caller's directory is never removed


async def test_artifacts_from_the_temp_workdir(local_sandbox: LocalProcessSandbox) -> None:
    request = req(
        "sh",
        "-c",
        "for i in 1 2 3; do echo $i > f$i.out; done; ln -s /etc/hostname link.out",
        artifacts=(ArtifactRule("*.out", max_count=2),),
    )
    result = await run(local_sandbox, request)
    assert [os.path.basename(a.path) for a in result.artifacts] == ["f1.out", "f2.out"]
    assert result.artifacts_skipped == 2  # f3 over max_count, the symlink refused


@pytest.mark.parametrize(
    ("request_", "error", "limit"),
    [
        (SandboxRequest("true", limits=LOCAL), LimitNotEnforceable, LIMIT_NETWORK),
        (req("true", limits=SandboxLimits()), LimitNotEnforceable, LIMIT_MEMORY),
        (req("true", limits=limits(memory_bytes=1 << 26)), LimitNotEnforceable, LIMIT_MEMORY),
        (req("true", limits=limits(max_processes=5)), LimitNotEnforceable, LIMIT_PROCESSES),
        (
            req("true", mounts=(Mount("/etc", "/etc2", "ro"),)),
            LimitNotEnforceable,
            LIMIT_FILESYSTEM,
        ),
        (req("true", image="alpine:3"), InvalidRequest, None),
    ],
)
def test_unenforceable_requests_are_rejected_before_running(
    local_sandbox: LocalProcessSandbox,
    request_: SandboxRequest,
    error: type[Exception],
    limit: str | None,
) -> None:
    with pytest.raises(error) as info:
        local_sandbox.execute(request_)
    if limit is not None:
        assert isinstance(info.value, LimitNotEnforceable)
        assert info.value.limit == limit


async def test_unknown_command(local_sandbox: LocalProcessSandbox) -> None:
    with pytest.raises(CommandNotFound):
        await run(local_sandbox, req("definitely-not-a-command-xyz"))


@pytest.mark.usefixtures("exit_watch")
async def test_wall_clock_kills_the_group_and_is_reported(
    local_sandbox: LocalProcessSandbox,
) -> None:
    marker = new_marker()
    request = req(PYTHON, "-c", FORK_AND_SLEEP, marker, limits=limits(wall_clock_seconds=0.3))
    start = trio.current_time()
    result = await run(local_sandbox, request)
    assert trio.current_time() - start < 2
    assert result.timed_out
    assert result.signal == 9
    assert "wall_clock" in result.limits_hit
    assert_gone(marker)


async def test_cpu_and_file_size_rlimits(local_sandbox: LocalProcessSandbox) -> None:
    spin = await run(
        local_sandbox,
        req(
            PYTHON,
            "-c",
            "while True: pass",
            limits=limits(cpu_seconds=0.5, wall_clock_seconds=8),
        ),
    )
    assert spin.signal in (9, 24)  # SIGKILL at the hard limit or SIGXCPU at the soft one
    assert not spin.timed_out
    write = "open('big', 'wb').write(b'x' * 100_000)"
    big = await run(local_sandbox, req(PYTHON, "-c", write, limits=limits(file_size_bytes=1000)))
    assert big.exit_code == 1
    assert b"File too large" in big.stderr


@pytest.mark.usefixtures("exit_watch")
async def test_output_is_bounded_across_both_streams(local_sandbox: LocalProcessSandbox) -> None:
    request = req(
        "sh",
        "-c",
        "head -c 5000 /dev/zero; head -c 5000 /dev/zero >&2",
        limits=limits(output_bytes=6000),
    )
    result = await run(local_sandbox, request)
    assert result.exit_code == 0
    assert len(result.stdout) + len(result.stderr) == 6000
    assert result.dropped_bytes == 4000
    assert result.output_truncated
    assert "output" in result.limits_hit


@pytest.mark.usefixtures("exit_watch")
async def test_cancellation_kills_and_cleans_up(local_sandbox: LocalProcessSandbox) -> None:
    marker = new_marker()
    execution = local_sandbox.execute(req(PYTHON, "-c", FORK_AND_SLEEP, marker))
    with trio.CancelScope() as scope:
        async with execution as events:
            await until_up(events, 2)
            held = remember(execution.owned())
            assert len(held.processes) == 1
            assert len(held.paths) == 1
            scope.cancel()
            await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert execution.owned().empty
    assert_gone(marker, held)


async def test_layer_provides_the_service_and_kills_on_teardown() -> None:
    marker = new_marker()
    async with open_layer(LocalProcessSandbox.layer(), Context.empty()) as ctx:
        sandbox = ctx.require(SandboxService)
        execution = sandbox.execute(req(PYTHON, "-c", FORK_AND_SLEEP, marker))
        events = await execution.__aenter__()  # left open: the layer's teardown must end it
        assert isinstance(await events.__anext__(), SandboxStarted)
        await until_up(events, 2)
        held = remember(sandbox.owned())
        assert held.processes
        assert held.paths
        assert sandbox.implementation.isolation is Isolation.UNISOLATED
    assert sandbox.owned().empty
    assert_gone(marker, held)


@attrs.define
class StaticResolver:
    """A SecretResolver with fixed values."""

    values: dict[str, str]

    async def resolve(self, secret_id: str) -> str:
        return self.values[secret_id]


async def test_layer_with_secrets_requires_and_uses_a_resolver() -> None:
    layer = LocalProcessSandbox.layer(with_secrets=True)
    assert SecretResolverService in layer.requires
    resolver = Layer.succeed(SecretResolverService, StaticResolver({"t": "s3cr3t"}))
    async with open_layer(layer.provide(resolver)) as ctx:
        request = req("sh", "-c", 'test "$TOKEN" = s3cr3t', secrets=(SecretHandle("TOKEN", "t"),))
        assert (await run(ctx.require(SandboxService), request)).ok


async def test_concurrent_executions_do_not_interfere(local_sandbox: LocalProcessSandbox) -> None:
    results: dict[int, bytes] = {}

    async def one(i: int) -> None:
        results[i] = (await run(local_sandbox, req("echo", str(i)))).stdout

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(one, i)
    assert results == {i: f"{i}\n".encode() for i in range(8)}


async def test_a_cancelled_next_event_loses_nothing(local_sandbox: LocalProcessSandbox) -> None:
    """Every other ``__anext__`` is cancelled at its first checkpoint: the stream still delivers
    every byte of output and ends with the full result, artifacts included."""
    script = "for i in 1 2 3; do echo $i > f$i.out; echo line $i; done"
    request = req("sh", "-c", script, artifacts=(ArtifactRule("*.out"),))
    events: list[SandboxEvent] = []
    cancelled = 0
    async with local_sandbox.execute(request) as stream:
        while not events or not isinstance(events[-1], SandboxExited):
            with trio.CancelScope() as scope:
                scope.cancel()
                events.append(await anext(stream))
            cancelled += scope.cancelled_caught
            if not isinstance(events[-1], SandboxExited):
                events.append(await anext(stream))
    assert cancelled > 0
    output = b"".join(e.data for e in events if isinstance(e, OutputChunk))
    assert output == b"line 1\nline 2\nline 3\n"
    exited = events[-1]
    assert isinstance(exited, SandboxExited)
    assert exited.result.ok
    names = [os.path.basename(a.path) for a in exited.result.artifacts]
    assert names == ["f1.out", "f2.out", "f3.out"]

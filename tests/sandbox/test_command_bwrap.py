"""The bubblewrap runner: ordinary behaviour (the hostile probes are in test_security_command)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from effectagent.effect import Context
from effectagent.effect._layer import open_layer
from sandbox import (
    UNLIMITED,
    ArtifactRule,
    BubblewrapSandbox,
    CommandNotFound,
    Isolation,
    LimitNotEnforceable,
    LocalProcessSandbox,
    Mount,
    OutputChunk,
    OwnedResources,
    SandboxExited,
    SandboxLimits,
    SandboxRequest,
    SandboxService,
    SandboxStarted,
    SandboxUnavailable,
    _bwrap_execution,
    _local,
    run,
)
from sandbox import _bwrap_execution as bwrap_execution
from sandbox._bwrap import WORKDIR, check_bwrap
from sandbox._bwrap_argv import bwrap_argv
from sandbox._command import InvalidRequest, SandboxCrashed
from sandbox._isolation import HostFacts
from sandbox._posture import LIMIT_MEMORY, LIMIT_NETWORK, LIMIT_PROCESSES

from .conftest import PYTHON, assert_gone, give_to_workload, new_marker, remember


def test_posture_matches_the_probed_host(bwrap_sandbox: BubblewrapSandbox) -> None:
    posture = bwrap_sandbox.implementation
    facts = bwrap_sandbox.facts
    assert posture.name == "bubblewrap"
    assert posture.isolation is Isolation.NAMESPACES
    assert posture.is_security_boundary
    assert posture.version[0].isdigit()
    assert LIMIT_NETWORK in posture.enforced_limits
    assert (LIMIT_MEMORY in posture.enforced_limits) == (facts.cgroup_memory is not None)
    assert (LIMIT_PROCESSES in posture.enforced_limits) == (facts.cgroup_pids is not None)


def test_unavailable_without_bwrap_or_namespaces() -> None:
    with pytest.raises(SandboxUnavailable, match="not installed"):
        BubblewrapSandbox(facts=HostFacts(None, False, None))
    with pytest.raises(SandboxUnavailable, match="namespaces"):
        BubblewrapSandbox(facts=HostFacts("/usr/bin/bwrap", False, None))


def test_memory_and_processes_are_rejected_without_cgroups() -> None:
    sandbox = BubblewrapSandbox(facts=HostFacts("/usr/bin/bwrap", True, None, None))
    assert {LIMIT_MEMORY, LIMIT_PROCESSES} <= sandbox.implementation.unenforced_limits
    for limits in (SandboxLimits(memory_bytes=1 << 26), SandboxLimits(max_processes=3)):
        with pytest.raises(LimitNotEnforceable):
            sandbox.execute(SandboxRequest("true", limits=limits))


async def test_echo_exit_code_and_streams(bwrap_sandbox: BubblewrapSandbox) -> None:
    request = SandboxRequest("sh", ("-c", "echo out; echo err >&2; pwd; exit 5"))
    async with bwrap_sandbox.execute(request) as events:
        seen = [e async for e in events]
    assert isinstance(seen[0], SandboxStarted)
    assert isinstance(seen[-1], SandboxExited)
    assert any(isinstance(e, OutputChunk) and e.stream == "stderr" for e in seen)
    result = seen[-1].result
    assert result.exit_code == 5
    assert result.stdout == f"out\n{WORKDIR}\n".encode()
    assert result.stderr == b"err\n"
    assert result.usage.peak_processes is None or result.usage.peak_processes >= 1
    assert result.implementation == bwrap_sandbox.implementation


async def test_stdin_and_only_allowlisted_env(
    bwrap_sandbox: BubblewrapSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EA_HOST_ONLY", "hidden")
    request = SandboxRequest("env", env_allowlist=("EA_X",), env={"EA_X": "1"})
    result = await run(bwrap_sandbox, request)
    assert result.ok
    names = sorted(line.split("=")[0] for line in result.stdout.decode().splitlines())
    assert names == ["EA_X", "PATH", "PWD"]  # PWD is set by bwrap's --chdir
    echoed = await run(bwrap_sandbox, SandboxRequest("cat", stdin=b"hello"))
    assert echoed.stdout == b"hello"


async def test_mounts_modes_cwd_and_artifacts(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    ro = shared_tmp / "ro"
    ro.mkdir()
    rw = give_to_workload(bwrap_sandbox, shared_tmp / "rw")
    (ro / "input.txt").write_text("data")
    script = (
        "cat /in/input.txt > /out/copy.txt; "
        "echo x > /in/new 2>/dev/null || echo ro-refused; "
        "printf w > $PWD/work.bin; pwd"
    )
    request = SandboxRequest(
        "sh",
        ("-c", script),
        mounts=(Mount(str(ro), "/in", "ro"), Mount(str(rw), "/out", "rw")),
        artifacts=(ArtifactRule("*.txt", root="/out"), ArtifactRule("*.bin")),
    )
    result = await run(bwrap_sandbox, request)
    assert result.ok, result.stderr
    assert result.stdout == f"ro-refused\n{WORKDIR}\n".encode()
    assert (rw / "copy.txt").read_text() == "data"
    assert not (ro / "new").exists()
    assert {(a.path, a.content) for a in result.artifacts} == {
        ("/out/copy.txt", b"data"),
        (f"{WORKDIR}/work.bin", b"w"),
    }
    elsewhere = await run(bwrap_sandbox, SandboxRequest("pwd", cwd="/out", mounts=request.mounts))
    assert elsewhere.stdout == b"/out\n"


async def test_artifacts_of_the_workdir_come_from_a_read_write_mount_over_it(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    # The workload writes into the mount it sees at the workdir; the hidden host workdir under it
    # stays empty, and collecting from there returned no artifact at all.
    project = give_to_workload(bwrap_sandbox, shared_tmp / "project")
    request = SandboxRequest(
        "sh",
        ("-c", "printf made > out.txt"),
        mounts=(Mount(str(project), WORKDIR, "rw"),),
        artifacts=(ArtifactRule("*.txt"),),
    )
    result = await run(bwrap_sandbox, request)
    assert result.ok, result.stderr
    assert (project / "out.txt").read_text() == "made"
    assert [(a.path, a.content) for a in result.artifacts] == [(f"{WORKDIR}/out.txt", b"made")]


async def test_a_process_limit_the_sandbox_init_leaves_no_room_in_is_refused(
    bwrap_sandbox: BubblewrapSandbox,
) -> None:
    # bubblewrap's sandbox init counts in the pids cgroup: max_processes=1 was accepted and then
    # failed as a SandboxCrashed ("Can't fork for pid 1") every time.
    one = SandboxRequest("/bin/echo", ("hi",), limits=SandboxLimits(max_processes=1))
    with pytest.raises(InvalidRequest, match=r"limits\.max_processes must be at least 2"):
        check_bwrap(one)
    if LIMIT_PROCESSES not in bwrap_sandbox.implementation.enforced_limits:
        with pytest.raises(LimitNotEnforceable):
            bwrap_sandbox.execute(one)
        return
    with pytest.raises(InvalidRequest, match="sandbox init"):
        bwrap_sandbox.execute(one)
    two = await run(bwrap_sandbox, attrs.evolve(one, limits=SandboxLimits(max_processes=2)))
    assert two.ok, two.stderr
    assert two.stdout == b"hi\n"


async def test_a_mount_point_missing_in_a_read_only_mount_is_refused_before_running(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    # bubblewrap cannot make the mount point inside a read-only mount: the request was accepted
    # and then failed as a SandboxCrashed ("Can't mkdir /in/out: Read-only file system").
    outer = shared_tmp / "outer"
    (outer / "present").mkdir(parents=True)
    (outer / "file").write_text("x")
    inner = shared_tmp / "inner"
    inner.mkdir()
    (inner / "note").write_text("inner")
    for nested, problem in (
        ("/in/out", "'/in/out' needs a mount point inside the read-only mount at '/in'"),
        ("/in/a/b", "where 'a/b' does not exist"),
        ("/in/file/x", "which holds no directory on its way"),
    ):
        mounts = (Mount(str(inner), nested), Mount(str(outer), "/in"))
        with pytest.raises(InvalidRequest, match=problem):
            await run(bwrap_sandbox, SandboxRequest("true", mounts=mounts))
    mounts = (Mount(str(outer), "/in"), Mount(str(inner), "/in/present"))
    result = await run(bwrap_sandbox, SandboxRequest("cat", ("/in/present/note",), mounts=mounts))
    assert result.stdout == b"inner"
    assert bwrap_sandbox.owned() == OwnedResources()


async def test_a_file_mounted_where_every_sandbox_has_a_directory_is_refused_before_running(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    # bubblewrap makes the workdir and /tmp as directories: a file mounted over one was accepted
    # and then failed as a SandboxCrashed ("Can't create file at /workspace: Is a directory").
    note = shared_tmp / "note.txt"
    note.write_text("x")
    note.chmod(0o644)
    for where in (WORKDIR, "/tmp"):
        request = SandboxRequest("true", mounts=(Mount(str(note), where),))
        with pytest.raises(InvalidRequest, match=f"'{where}' is a directory in every sandbox"):
            await run(bwrap_sandbox, request)
    inside = SandboxRequest("cat", ("/tmp/note.txt",), mounts=(Mount(str(note), "/tmp/note.txt"),))
    assert (await run(bwrap_sandbox, inside)).stdout == b"x"
    assert bwrap_sandbox.owned() == OwnedResources()


async def test_request_problems_found_before_running(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    with pytest.raises(CommandNotFound):
        await run(bwrap_sandbox, SandboxRequest("no-such-program-xyz"))
    # A host program outside the sandbox's view (this venv's interpreter) does not resolve.
    with pytest.raises(CommandNotFound):
        await run(bwrap_sandbox, SandboxRequest(sys.executable))
    with pytest.raises(InvalidRequest, match="does not exist"):
        await run(bwrap_sandbox, SandboxRequest("true", mounts=(Mount("/nonexistent-x", "/x"),)))
    with pytest.raises(InvalidRequest, match="outside"):
        bwrap_sandbox.execute(SandboxRequest("true", cwd="/usr"))
    with pytest.raises(InvalidRequest, match="image"):
        bwrap_sandbox.execute(SandboxRequest("true", image="ubuntu"))
    mounts = (Mount(str(give_to_workload(bwrap_sandbox, shared_tmp)), "/data", "rw"),)
    with pytest.raises(InvalidRequest, match="not a directory"):
        await run(bwrap_sandbox, SandboxRequest("true", cwd="/data/missing", mounts=mounts))
    # The private /tmp starts empty: a directory below it exists only to hold a mount.
    with pytest.raises(InvalidRequest, match="'/tmp/missing' is not a directory"):
        await run(bwrap_sandbox, SandboxRequest("true", cwd="/tmp/missing"))
    below = (Mount(mounts[0].host_path, "/tmp/holder/data"),)
    for cwd in ("/tmp", "/tmp/holder", "/tmp/holder/data"):
        result = await run(bwrap_sandbox, SandboxRequest("pwd", cwd=cwd, mounts=below))
        assert result.stdout == cwd.encode() + b"\n"


async def test_setup_failure_of_bwrap_is_a_crash(
    bwrap_sandbox: BubblewrapSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every request problem the host can see is refused before anything runs (the tests above);
    # what is left is bubblewrap itself failing as it sets up: here, an option it refuses.
    made = bwrap_argv

    def refused(**options: Any) -> list[str]:
        argv = list(made(**options))
        return [argv[0], "--no-such-option", *argv[1:]]

    monkeypatch.setattr(bwrap_execution, "bwrap_argv", refused)
    with pytest.raises(SandboxCrashed, match="bubblewrap failed before the command ran"):
        await run(bwrap_sandbox, SandboxRequest("true"))
    assert bwrap_sandbox.owned() == OwnedResources()


async def test_a_mount_covering_a_file_with_a_directory_or_back_is_refused_before_running(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    # bubblewrap mounts a directory only over a directory and a file over a file; inside a
    # read-write mount the request was accepted and failed as a SandboxCrashed ("Can't mkdir
    # /d/x: Not a directory").
    holder = shared_tmp / "holder"
    (holder / "sub").mkdir(parents=True)
    (holder / "x").write_text("x")
    directory = shared_tmp / "other"
    directory.mkdir()
    note = shared_tmp / "note"
    note.write_text("n")
    for path in (holder, holder / "sub", directory):
        path.chmod(0o777)
    for path in (holder / "x", note):
        path.chmod(0o666)
    for mode in ("ro", "rw"):
        for source, where, covered in (
            (directory, "/d/x", "file 'x'"),
            (note, "/d/sub", "directory 'sub'"),
        ):
            mounts = (Mount(str(holder), "/d", mode), Mount(str(source), where))
            with pytest.raises(InvalidRequest, match=f"would cover the {covered}"):
                await run(bwrap_sandbox, SandboxRequest("true", mounts=mounts))
    mounts = (Mount(str(holder), "/d", "rw"), Mount(str(note), "/d/x"))
    result = await run(bwrap_sandbox, SandboxRequest("cat", ("/d/x",), mounts=mounts))
    assert result.stdout == b"n"
    assert bwrap_sandbox.owned() == OwnedResources()


async def test_usage_is_measured(bwrap_sandbox: BubblewrapSandbox) -> None:
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    result = await run(bwrap_sandbox, SandboxRequest(PYTHON, ("-c", spin)))
    assert result.ok
    assert result.usage.cpu_seconds is not None
    assert 0.25 <= result.usage.cpu_seconds < 2
    assert result.usage.wall_seconds >= 0.25
    if bwrap_sandbox.facts.cgroup_memory is not None:
        assert result.usage.peak_memory_bytes is not None
        assert result.usage.peak_memory_bytes > 1 << 20


async def test_layer_builds_and_tears_down() -> None:
    async with open_layer(BubblewrapSandbox.layer(), Context.empty()) as ctx:
        sandbox = ctx.require(SandboxService)
        result = await run(sandbox, SandboxRequest("echo", ("layer",)))
        assert result.stdout == b"layer\n"
        assert sandbox.implementation.isolation is Isolation.NAMESPACES


async def test_stopping_early_kills_and_cleans_up(bwrap_sandbox: BubblewrapSandbox) -> None:
    marker = "eamark-early-stop"
    request = SandboxRequest(
        PYTHON, ("-c", "print('go', flush=True); import time; time.sleep(30)", marker)
    )
    execution = bwrap_sandbox.execute(request)
    async with execution as events:
        async for event in events:
            if isinstance(event, OutputChunk):
                break
        held = remember(execution.owned())
        assert held.paths
        assert held.cgroups
        assert all([await trio.Path(p).exists() for p in held.paths | held.cgroups])
    assert_gone(marker, held)


@pytest.mark.parametrize("runner", ["bwrap", "local"])
async def test_an_execution_runs_once(
    runner: str, bwrap_sandbox: BubblewrapSandbox, local_sandbox: LocalProcessSandbox
) -> None:
    # Entering it again would start a second workload over the first one's state, which nothing
    # would kill, reap or clean up: refused, inside the block and after it.
    marker = new_marker()
    if runner == "bwrap":
        sandbox: BubblewrapSandbox | LocalProcessSandbox = bwrap_sandbox
        request = SandboxRequest(PYTHON, ("-c", "print('once')", marker))
    else:
        sandbox = local_sandbox
        lifted = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)
        request = SandboxRequest(
            PYTHON, ("-c", "print('once')", marker), network="host", limits=lifted
        )
    execution = sandbox.execute(request)
    async with execution as events:
        held = remember(execution.owned())
        with pytest.raises(RuntimeError, match="runs once"):
            async with execution:
                pass
        kinds = [type(event) async for event in events]
    assert kinds[0] is SandboxStarted
    assert kinds[-1] is SandboxExited
    assert OutputChunk in kinds
    with pytest.raises(RuntimeError, match="runs once"):
        async with execution:
            pass
    assert execution.owned().empty
    assert_gone(marker, held)


@pytest.mark.parametrize("runner", ["bwrap", "local"])
async def test_the_event_loop_runs_while_a_workloads_files_are_removed(
    runner: str,
    bwrap_sandbox: BubblewrapSandbox,
    local_sandbox: LocalProcessSandbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A workload may leave a million files in its working directory: removing them takes
    # seconds, during which every other task of the host would stand still were it done on the
    # event loop. The removal calls back into the loop, which only a worker thread can do.
    module = _bwrap_execution if runner == "bwrap" else _local
    real = module.remove_tree
    ran_meanwhile: list[str] = []

    async def on_the_loop(path: str) -> None:
        await trio.lowlevel.checkpoint()
        ran_meanwhile.append(path)

    def remove_tree(path: str) -> None:
        trio.from_thread.run(on_the_loop, path)
        real(path)

    monkeypatch.setattr(module, "remove_tree", remove_tree)
    marker = new_marker()
    script = "import os\nfor i in range(100): os.close(os.open(str(i), os.O_CREAT | os.O_WRONLY))"
    if runner == "bwrap":
        sandbox: BubblewrapSandbox | LocalProcessSandbox = bwrap_sandbox
        request = SandboxRequest(PYTHON, ("-c", script, marker))
    else:
        sandbox = local_sandbox
        lifted = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)
        request = SandboxRequest(PYTHON, ("-c", script, marker), network="host", limits=lifted)
    execution = sandbox.execute(request)
    async with execution as events:
        held = remember(execution.owned())
        results = [event async for event in events if isinstance(event, SandboxExited)]
    assert results[0].result.exit_code == 0
    assert len(held.paths) == 1
    assert ran_meanwhile == list(held.paths)
    assert_gone(marker, held)


async def test_concurrent_executions_are_separate(bwrap_sandbox: BubblewrapSandbox) -> None:
    results: dict[int, bytes] = {}

    async def one(i: int) -> None:
        script = f"echo {i} > /workspace/f; sleep 0.1; cat /workspace/f; ls /tmp | wc -l"
        results[i] = (await run(bwrap_sandbox, SandboxRequest("sh", ("-c", script)))).stdout

    async with trio.open_nursery() as nursery:
        for i in range(6):
            nursery.start_soon(one, i)
    assert results == {i: f"{i}\n0\n".encode() for i in range(6)}


async def test_accounting_can_be_turned_off(bwrap_sandbox: BubblewrapSandbox) -> None:
    lean = BubblewrapSandbox(accounting=False)
    lifted = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)
    execution = lean.execute(SandboxRequest("true", limits=lifted))
    async with execution as events:
        assert isinstance(await anext(events), SandboxStarted)
        assert execution.owned().cgroups == frozenset()  # no cgroup only to measure
        assert len(execution.owned().paths) == 1  # the workdir
        result = [e async for e in events][-1].result  # type: ignore[union-attr]
    assert result.ok
    assert result.usage.peak_memory_bytes is None
    if lean.implementation.enforces(LIMIT_MEMORY):  # a limit still gets its cgroup: by default
        limited = lean.execute(SandboxRequest("true"))
        async with limited as events:
            assert isinstance(await anext(events), SandboxStarted)
            assert len(limited.owned().cgroups) == 2  # memory and pids, each with its limit
            assert [e async for e in events][-1].result.ok  # type: ignore[union-attr]


@pytest.mark.parametrize("runner", ["bwrap", "local"])
@pytest.mark.parametrize("size", ["one-long-argument", "many-arguments"])
async def test_arguments_too_large_for_the_kernel_are_an_invalid_request(
    runner: str, size: str, bwrap_sandbox: BubblewrapSandbox, local_sandbox: LocalProcessSandbox
) -> None:
    """The kernel refuses a new program whose one argument passes 128 KiB or whose arguments
    pass its total (E2BIG): that was reported as ``SandboxCrashed``, the machinery's failure,
    though it is the request's size; nothing runs either way."""
    args = ("x" * 200_000,) if size == "one-long-argument" else ("y" * 100_000,) * 40
    if runner == "bwrap":
        sandbox: BubblewrapSandbox | LocalProcessSandbox = bwrap_sandbox
        request = SandboxRequest("true", args)
    else:
        sandbox = local_sandbox
        lifted = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)
        request = SandboxRequest("true", args, network="host", limits=lifted)
    with pytest.raises(InvalidRequest, match="E2BIG"):
        await run(sandbox, request)

"""Security suite for the bubblewrap command sandbox.

Every probe is hostile code run inside the sandbox. Each one must be contained with a typed result
or error, and leave nothing behind: no process carrying the probe's marker, no unreaped child, no
temporary directory or cgroup of the execution. Limits the host cannot enforce are not skipped:
the probe then asserts the request is *rejected* (the posture is honest) — see
``test_this_host_enforces_everything`` for what this machine is expected to enforce.
"""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from pathlib import Path

import attrs
import pytest
import trio

from sandbox import (
    LIMIT_MEMORY,
    LIMIT_PROCESSES,
    BubblewrapSandbox,
    HostFacts,
    LimitNotEnforceable,
    Mount,
    OutputChunk,
    SandboxEvent,
    SandboxExited,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    SandboxStarted,
    SecretHandle,
    SecretUnavailable,
)

from .conftest import PYTHON, assert_gone, new_marker, processes_with, wait_for_processes


@attrs.define
class Probe:
    """One contained execution: its events, result and what it owned on the host."""

    events: list[SandboxEvent]
    owned: tuple[str, ...]
    pid: int

    @property
    def result(self) -> SandboxResult:
        last = self.events[-1]
        assert isinstance(last, SandboxExited)
        return last.result

    @property
    def stdout(self) -> str:
        return self.result.stdout.decode(errors="replace")


async def probe(
    sandbox: BubblewrapSandbox,
    code: str,
    *,
    shell: bool = False,
    limits: SandboxLimits | None = None,
    **kw: object,
) -> Probe:
    """Run ``code`` with the system Python (or ``sh``), then assert that nothing of it is left.

    The marker is the program's first argument (``$0`` for ``sh``), so every process forked from it
    carries it in its command line.
    """
    marker = new_marker()
    request = SandboxRequest(
        "sh" if shell else PYTHON,
        ("-c", code, marker),
        limits=limits or SandboxLimits(wall_clock_seconds=2),
        **kw,  # type: ignore[arg-type]
    )
    execution = sandbox.execute(request)
    async with execution as stream:
        events = [e async for e in stream]
        owned = execution.owned_paths
    started = events[0]
    assert isinstance(started, SandboxStarted)
    assert_gone(marker, pid=started.pid, paths=owned)
    return Probe(events, owned, started.pid)


def test_this_host_enforces_everything(bwrap_sandbox: BubblewrapSandbox) -> None:
    """This machine (root, cgroup v1 memory and pids controllers) enforces every limit.

    Set EFFECTAGENT_SANDBOX_PARTIAL_HOST=1 on a CI host known to lack cgroups; the memory and fork
    probes then check rejection instead.
    """
    if os.environ.get("EFFECTAGENT_SANDBOX_PARTIAL_HOST") == "1":
        assert bwrap_sandbox.implementation.unenforced_limits <= {LIMIT_MEMORY, LIMIT_PROCESSES}
    else:
        assert bwrap_sandbox.implementation.unenforced_limits == frozenset()


# ---- filesystem ----------------------------------------------------------------------------


async def test_host_files_are_invisible(bwrap_sandbox: BubblewrapSandbox) -> None:
    code = """
import os, sys
for path in ["/etc/passwd", "/etc/shadow", "/work/main/pyproject.toml", "/root", "/home",
             "/proc/1/root/etc/passwd", "/work", "/tmp/" + os.path.basename(sys.argv[0])]:
    try:
        with open(path, "rb") as f:
            print("READ", path, f.read(64))
    except OSError as e:
        print("DENIED", path, e.errno)
"""
    run = await probe(bwrap_sandbox, code)
    assert run.result.exit_code == 0, run.result.stderr
    assert "READ" not in run.stdout
    assert run.stdout.count("DENIED") == 8
    assert "root:" not in run.stdout


async def test_writes_outside_the_mounts_fail(
    bwrap_sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    escape = tmp_path / f"escape-{uuid.uuid4().hex}"
    # Global kernel knobs are only opened for writing, never written: if the sandbox failed, the
    # test must not change the host.
    code = f"""
import os
targets = ["/escape", "/usr/escape", "/etc/escape", "/data/escape", {str(escape)!r}]
knobs = ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
         "/proc/sys/kernel/hostname", "/proc/sys/net/ipv4/ip_forward"]
for path in targets:
    try:
        with open(path, "w") as f:
            f.write("x")
        print("WROTE", path)
    except OSError as e:
        print("DENIED", path, e.errno)
for path in knobs:
    try:
        os.close(os.open(path, os.O_WRONLY))
        print("WRITABLE", path)
    except OSError as e:
        print("DENIED", path, e.errno)
"""
    run = await probe(bwrap_sandbox, code, mounts=(Mount(str(ro), "/data", "ro"),))
    assert "WROTE" not in run.stdout, run.stdout
    assert "WRITABLE" not in run.stdout, run.stdout
    assert run.stdout.count("DENIED") == 9
    assert list(ro.iterdir()) == []
    assert not escape.exists()


async def test_no_capabilities_and_no_mount_escape(bwrap_sandbox: BubblewrapSandbox) -> None:
    code = """
import ctypes, os
status = open("/proc/self/status").read()
print("CAPEFF", status.split("CapEff:")[1].split()[0])
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.mount(b"/dev", b"/tmp", None, 4096, None)  # MS_BIND
print("MOUNT", rc, ctypes.get_errno())
print("PID", os.getpid())
"""
    run = await probe(bwrap_sandbox, code)
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    assert lines["CAPEFF"] == "0000000000000000"
    assert lines["MOUNT"].startswith("-1 ")
    assert int(lines["PID"]) < 10  # a private pid namespace


# ---- network -------------------------------------------------------------------------------


async def test_network_none_cannot_reach_a_host_listener(bwrap_sandbox: BubblewrapSandbox) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=1)
    print("CONNECTED")
except OSError as e:
    print("REFUSED", e.errno)
"""
    try:
        contained = await probe(bwrap_sandbox, code)
        assert "REFUSED" in contained.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()
        # Control: the same probe with the host network does connect, so the probe can fail.
        control = await probe(bwrap_sandbox, code, network="host")
        assert "CONNECTED" in control.stdout
        conn, _ = listener.accept()
        conn.close()
    finally:
        listener.close()


# ---- resource exhaustion -------------------------------------------------------------------

FORK_BOMB = """
import os, sys, time
made = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        made += 1
except OSError as e:
    print("STOPPED", made, e.errno, flush=True)
else:
    print("NOT STOPPED", made, flush=True)
"""


async def test_fork_bomb_is_bounded(bwrap_sandbox: BubblewrapSandbox) -> None:
    limits = SandboxLimits(max_processes=16, wall_clock_seconds=1.5)
    if LIMIT_PROCESSES not in bwrap_sandbox.implementation.enforced_limits:
        with pytest.raises(LimitNotEnforceable):
            await probe(bwrap_sandbox, FORK_BOMB, limits=limits)
        return
    run = await probe(bwrap_sandbox, FORK_BOMB, limits=limits)
    assert run.stdout.startswith("STOPPED"), run.stdout
    assert int(run.stdout.split()[1]) < 16
    assert LIMIT_PROCESSES in run.result.limits_hit
    assert run.result.usage.peak_processes is not None
    assert run.result.usage.peak_processes <= 16


MEMORY_BOMB = """
blocks = []
for i in range(64):
    blocks.append(bytearray(8 << 20))  # touched: counted as memory, not just address space
    print(i, flush=True)
print("SURVIVED")
"""


async def test_memory_bomb_is_oom_killed_and_reported(bwrap_sandbox: BubblewrapSandbox) -> None:
    limits = SandboxLimits(memory_bytes=64 << 20, wall_clock_seconds=2)
    if LIMIT_MEMORY not in bwrap_sandbox.implementation.enforced_limits:
        with pytest.raises(LimitNotEnforceable):
            await probe(bwrap_sandbox, MEMORY_BOMB, limits=limits)
        return
    run = await probe(bwrap_sandbox, MEMORY_BOMB, limits=limits)
    assert "SURVIVED" not in run.stdout
    assert run.result.oom_killed
    assert LIMIT_MEMORY in run.result.limits_hit
    assert run.result.exit_code == 128 + 9  # SIGKILL of the command, reported by bwrap
    assert not run.result.timed_out
    peak = run.result.usage.peak_memory_bytes
    assert peak is not None
    assert peak <= 64 << 20


async def test_infinite_loop_stops_at_the_cpu_limit(bwrap_sandbox: BubblewrapSandbox) -> None:
    limits = SandboxLimits(cpu_seconds=1, wall_clock_seconds=8)  # generous: CI cores are shared
    run = await probe(bwrap_sandbox, "while True: pass", limits=limits)
    assert run.result.exit_code in (128 + 9, 128 + 24)  # SIGKILL or SIGXCPU inside
    assert not run.result.timed_out
    assert run.result.usage.cpu_seconds is not None
    assert 0.5 <= run.result.usage.cpu_seconds < 2.5  # rlimit ticks vs precise cgroup time


async def test_infinite_loop_stops_at_the_wall_clock(bwrap_sandbox: BubblewrapSandbox) -> None:
    code = "import os\nfor _ in range(3): os.fork()\nwhile True: pass"  # 8 spinning processes
    run = await probe(bwrap_sandbox, code, limits=SandboxLimits(wall_clock_seconds=0.5))
    assert run.result.timed_out
    assert run.result.signal == 9
    assert run.result.usage.wall_seconds < 1.5


async def test_output_flood_is_bounded(bwrap_sandbox: BubblewrapSandbox) -> None:
    code = "import sys\nwhile True: sys.stdout.buffer.write(b'A' * 65536)"
    limits = SandboxLimits(output_bytes=10_000, wall_clock_seconds=0.5)
    run = await probe(bwrap_sandbox, code, limits=limits)
    streamed = sum(len(e.data) for e in run.events if isinstance(e, OutputChunk))
    assert streamed == 10_000
    assert run.result.stdout == b"A" * 10_000
    assert run.result.output_truncated
    assert run.result.dropped_bytes > 0
    assert run.result.timed_out


async def test_huge_file_write_is_bounded(bwrap_sandbox: BubblewrapSandbox) -> None:
    code = """
import errno
try:
    with open("/workspace/big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20))
    print("WROTE ALL")
except OSError as e:
    print("EFBIG" if e.errno == errno.EFBIG else e)
import os
print(os.path.getsize("/workspace/big"))
"""
    run = await probe(bwrap_sandbox, code, limits=SandboxLimits(file_size_bytes=1 << 20))
    first, size = run.stdout.split()
    assert first == "EFBIG"
    assert int(size) <= 1 << 20
    killed = await probe(
        bwrap_sandbox,
        'head -c 5000000 /dev/zero > /tmp/f; echo "$? $(stat -c %s /tmp/f)"',
        shell=True,
        limits=SandboxLimits(file_size_bytes=4096),
    )
    assert killed.result.stdout == b"153 4096\n"  # head was killed by SIGXFSZ (128 + 25)


# ---- secrets ---------------------------------------------------------------------------------


@attrs.define
class Vault:
    """A SecretResolver with one canary secret."""

    value: str
    fail: bool = False

    async def resolve(self, secret_id: str) -> str:
        if self.fail:
            raise ValueError(f"refusing to reveal {self.value}")
        assert secret_id == "canary"
        return self.value


async def test_secret_canary_never_leaks_outside_the_process(
    bwrap_sandbox: BubblewrapSandbox,
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    sandbox = BubblewrapSandbox(secrets=Vault(canary))
    code = """
import hashlib, os, sys, time
value = os.environ["API_TOKEN"]
print(hashlib.sha256(value.encode()).hexdigest(), flush=True)
time.sleep(0.3)
"""
    marker = new_marker()
    request = SandboxRequest(
        PYTHON, ("-c", code, marker), secrets=(SecretHandle("API_TOKEN", "canary"),)
    )
    assert canary not in repr(request)
    execution = sandbox.execute(request)
    cmdlines: list[bytes] = []
    async with execution as stream:
        events = []
        async for event in stream:
            events.append(event)
            if isinstance(event, OutputChunk):  # running: inspect what the host can see
                for pid in processes_with(marker):
                    cmdlines.append(await trio.Path(f"/proc/{pid}/cmdline").read_bytes())
    assert cmdlines
    assert all(canary.encode() not in line for line in cmdlines)
    result = events[-1].result  # type: ignore[union-attr]
    assert result.stdout.decode().strip() == hashlib.sha256(canary.encode()).hexdigest()
    for event in events:
        assert canary not in repr(event)
    assert canary.encode() not in result.stdout + result.stderr
    assert_gone(marker)


async def test_a_printed_secret_is_only_in_the_output(bwrap_sandbox: BubblewrapSandbox) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    sandbox = BubblewrapSandbox(secrets=Vault(canary))
    run = await probe(
        sandbox,
        "import os; print(os.environ['TOKEN'])",
        secrets=(SecretHandle("TOKEN", "canary"),),
    )
    assert run.result.stdout == f"{canary}\n".encode()  # the user's own data
    assert canary not in repr(run.result)


async def test_a_failing_resolver_does_not_leak_into_the_error(
    bwrap_sandbox: BubblewrapSandbox,
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    sandbox = BubblewrapSandbox(secrets=Vault(canary, fail=True))
    request = SandboxRequest("true", secrets=(SecretHandle("TOKEN", "canary"),))
    with pytest.raises(SecretUnavailable) as info:
        async with sandbox.execute(request):
            pass
    assert canary not in str(info.value)
    assert canary not in repr(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__
    with pytest.raises(SecretUnavailable, match="no SecretResolver"):
        async with bwrap_sandbox.execute(request):
            pass


# ---- cancellation ------------------------------------------------------------------------------


async def test_cancellation_kills_the_namespace_and_leaves_nothing(
    bwrap_sandbox: BubblewrapSandbox,
) -> None:
    marker = new_marker()
    code = "import os, time\nfor _ in range(2): os.fork()\nprint('up', flush=True)\ntime.sleep(30)"
    request = SandboxRequest(PYTHON, ("-c", code, marker))
    execution = bwrap_sandbox.execute(request)
    pid = None
    with trio.move_on_after(5) as scope:
        async with execution as stream:
            async for event in stream:
                if isinstance(event, SandboxStarted):
                    pid = event.pid
                if isinstance(event, OutputChunk):
                    await wait_for_processes(marker, 4)
                    scope.cancel()
    assert scope.cancelled_caught
    assert pid is not None
    assert_gone(marker, pid=pid, paths=execution.owned_paths)


async def test_the_namespace_alone_takes_everything_down(bwrap_sandbox: BubblewrapSandbox) -> None:
    """Without cgroups (hosts lacking them) killing bwrap still kills every process inside."""
    facts = bwrap_sandbox.facts
    bare = BubblewrapSandbox(facts=HostFacts(facts.bwrap, facts.user_namespaces, None, None, None))
    code = "import os, time\nfor _ in range(2): os.fork()\ntime.sleep(30)"
    run = await probe(bare, code, limits=SandboxLimits(wall_clock_seconds=0.5))
    assert run.result.timed_out
    assert run.owned == run.owned[:1]  # only the workdir: no cgroup was used

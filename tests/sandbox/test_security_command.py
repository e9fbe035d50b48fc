"""Security suite for the bubblewrap command sandbox.

Every probe is hostile code run inside the sandbox. Each one must be contained with a typed result
or error, and leave nothing behind: no process carrying the probe's marker, nothing the execution
held while it ran (read through its public ``owned()``: processes, cgroups, temp dirs), no process
descended from the test. Limits the host cannot enforce are not skipped: the probe then asserts
the request is *rejected* (the posture is honest) — see ``test_this_host_enforces_everything``
for what this machine is expected to enforce.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import os
import socket
import stat
import sys
import uuid
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from sandbox import (
    UNLIMITED,
    BubblewrapSandbox,
    LimitNotEnforceable,
    Mount,
    OutputChunk,
    OwnedResources,
    SandboxEvent,
    SandboxExited,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    SandboxStarted,
    SecretHandle,
    WorkloadIdentity,
    run,
)
from sandbox import _bwrap_execution as bwrap_execution
from sandbox._command import InvalidRequest, SandboxCrashed, SecretUnavailable
from sandbox._isolation import HostFacts, probe_host
from sandbox._posture import LIMIT_MEMORY, LIMIT_PROCESSES
from sandbox._process_control import can_limit_other_users

from .conftest import (
    PYTHON,
    Held,
    assert_gone,
    give_to_workload,
    new_marker,
    processes_with,
    remember,
)


@attrs.define
class Probe:
    """One contained execution: its events, result and what it held on the host while it ran."""

    events: list[SandboxEvent]
    held: Held
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
        events = [await anext(stream)]  # started: it holds its workdir, cgroups and processes
        held = remember(execution.owned())
        events += [e async for e in stream]
    started = events[0]
    assert isinstance(started, SandboxStarted)
    assert started.pid in held.processes
    assert execution.owned().empty
    assert_gone(marker, held)
    return Probe(events, held, started.pid)


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
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    ro = shared_tmp / "ro"
    ro.mkdir()
    escape = shared_tmp / f"escape-{uuid.uuid4().hex}"
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


async def test_the_workload_does_not_see_the_hosts_name(bwrap_sandbox: BubblewrapSandbox) -> None:
    code = """
import socket
print(socket.gethostname())
print(open("/proc/sys/kernel/hostname").read().strip())
"""
    run = await probe(bwrap_sandbox, code)
    assert run.result.exit_code == 0, run.result.stderr
    assert run.stdout.split() == ["sandbox", "sandbox"]
    assert socket.gethostname() not in run.stdout.split()


async def test_no_user_namespace_of_its_own_gives_the_workload_root(
    bwrap_sandbox: BubblewrapSandbox,
) -> None:
    # In a user namespace of its own a workload holds every capability: it may mount, build a
    # network stack and reach kernel code meant for privileged users only.
    code = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
rc = libc.unshare(CLONE_NEWUSER)
print("UNSHARE", rc, ctypes.get_errno())
if rc == 0:
    print("CAPEFF", open("/proc/self/status").read().split("CapEff:")[1].split()[0])
"""
    run = await probe(bwrap_sandbox, code)
    assert run.result.exit_code == 0, run.result.stderr
    assert run.stdout.startswith("UNSHARE -1 "), run.stdout
    assert "CAPEFF" not in run.stdout
    assert any(
        "user namespaces: the workload cannot" in note
        for note in bwrap_sandbox.implementation.notes
    )
    # Control: facts without the option give a workload its own root, and the posture says so.
    facts = attrs.evolve(probe_host(), disable_userns=False)
    exposed = BubblewrapSandbox(facts=facts)
    assert any("user namespaces: NOT disabled" in note for note in exposed.implementation.notes)
    control = await probe(exposed, code)
    unshared, capabilities = control.stdout.splitlines()
    assert unshared == "UNSHARE 0 0"
    assert int(capabilities.removeprefix("CAPEFF "), 16) != 0


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
    assert run.result.exit_code == 128 + 9  # the sandbox was SIGKILLed; bwrap reported it
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


@pytest.mark.parametrize("from_outside", [False, True], ids=["prlimit-in-front", "from-outside"])
async def test_rlimits_hold_however_they_are_set(
    bwrap_sandbox: BubblewrapSandbox, monkeypatch: pytest.MonkeyPatch, from_outside: bool
) -> None:
    """Set on the blocked sandbox child when this process may (its own user's process, or with
    CAP_SYS_RESOURCE), else by prlimit exec'd in front of bwrap: the workload sees them either way."""
    impossible = from_outside and bwrap_sandbox.identity is not None and not can_limit_other_users()
    monkeypatch.setattr(bwrap_execution, "can_limit_other_users", lambda: from_outside)
    if impossible:  # why prlimit goes in front on this host: from outside, the kernel refuses
        with pytest.raises(SandboxCrashed, match="cannot confine"):
            await probe(bwrap_sandbox, "pass")
        return
    code = "import resource as r; print(r.getrlimit(r.RLIMIT_CPU), r.getrlimit(r.RLIMIT_FSIZE))"
    run = await probe(
        bwrap_sandbox, code, limits=SandboxLimits(cpu_seconds=7, file_size_bytes=12345)
    )
    assert run.stdout == "(7, 8) (12345, 12345)\n"


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


@attrs.frozen
class OddVault:
    """A resolver (not type-checked) answering with something no environment can hold."""

    value: object

    async def resolve(self, secret_id: str) -> str:
        return self.value  # type: ignore[return-value]  # the point of the test


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"canary-bytes", "the value is a bytes"),
        (None, "the value is a NoneType"),
        ("canary-\ud800", "the value is not encodable text"),
    ],
)
async def test_a_resolved_value_no_environment_can_hold_is_refused_before_anything_runs(
    value: object, reason: str
) -> None:
    marker = new_marker()
    sandbox = BubblewrapSandbox(secrets=OddVault(value))
    request = SandboxRequest("true", (marker,), secrets=(SecretHandle("TOKEN", "odd"),))
    with pytest.raises(SecretUnavailable) as info:
        async with sandbox.execute(request):
            pass
    assert info.value.reason == reason
    assert "canary" not in repr(info.value)
    assert_gone(marker)


# ---- cancellation ------------------------------------------------------------------------------


async def test_cancellation_kills_the_namespace_and_leaves_nothing(
    bwrap_sandbox: BubblewrapSandbox,
) -> None:
    marker = new_marker()
    code = "import os, time\nfor _ in range(2): os.fork()\nprint('up', flush=True)\ntime.sleep(30)"
    request = SandboxRequest(PYTHON, ("-c", code, marker))
    execution = bwrap_sandbox.execute(request)
    held = Held()
    with trio.CancelScope() as scope:
        async with execution as stream:
            said = 0
            async for event in stream:
                if isinstance(event, OutputChunk):
                    said += event.data.count(b"up")
                if said == 4:  # all four processes run
                    held = remember(execution.owned())
                    assert len(processes_with(marker)) == 6  # with bwrap and its init
                    scope.cancel()
                    await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert len(held.processes) >= 6  # bwrap, its sandbox init, the four (they are in the cgroups)
    assert_gone(marker, held)


async def test_the_namespace_alone_takes_everything_down(bwrap_sandbox: BubblewrapSandbox) -> None:
    """Without cgroups (hosts lacking them) killing bwrap still kills every process inside."""
    facts = bwrap_sandbox.facts
    bare = BubblewrapSandbox(facts=HostFacts(facts.bwrap, facts.user_namespaces, None, None, None))
    code = "import os, time\nfor _ in range(2): os.fork()\ntime.sleep(30)"
    limits = SandboxLimits(wall_clock_seconds=0.5, memory_bytes=UNLIMITED, max_processes=UNLIMITED)
    run = await probe(bare, code, limits=limits)
    assert run.result.timed_out
    assert run.held.cgroups == set()  # no cgroup was used
    assert len(run.held.paths) == 1  # the workdir


# ---- who the workload is on the host ---------------------------------------------------------


def test_the_workload_never_runs_as_host_root(bwrap_sandbox: BubblewrapSandbox) -> None:
    identity = bwrap_sandbox.identity
    if os.geteuid() != 0:
        assert identity is None  # it runs as this (unprivileged) process's own user
        return
    assert identity == WorkloadIdentity.nobody()
    with pytest.raises(ValueError, match="unprivileged"):
        WorkloadIdentity(0, 0)


PLANT = """
import os, shutil, stat
shutil.copy("/usr/bin/python3", "/data/py")
outcomes = {"uid": os.getuid(), "euid": os.geteuid()}
for name, attempt in {
    "chmod": lambda: os.chmod("/data/py", 0o6755),
    "chmod_g": lambda: os.chmod("/data/py", 0o2755),
    "create": lambda: os.close(os.open("/data/made", os.O_CREAT | os.O_WRONLY, 0o4755)),
    "mknod": lambda: os.mknod("/data/node", 0o4755 | stat.S_IFREG),
    "device": lambda: os.mknod("/data/dev", 0o666 | stat.S_IFCHR, os.makedev(1, 3)),
}.items():
    try:
        attempt()
        outcomes[name] = "done"
    except OSError as e:
        outcomes[name] = e.errno
os.chmod("/data/py", 0o755)  # an ordinary mode is allowed
print(outcomes)
"""


async def test_a_setuid_file_planted_in_a_mount_raises_no_privilege_on_the_host(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    data = give_to_workload(bwrap_sandbox, shared_tmp / "data")
    run = await probe(bwrap_sandbox, PLANT, mounts=(Mount(str(data), "/data", "rw"),))
    assert run.result.exit_code == 0, run.result.stderr
    outcomes = ast.literal_eval(run.stdout)
    expected = bwrap_sandbox.identity.uid if bwrap_sandbox.identity else os.geteuid()
    assert outcomes["uid"] == outcomes["euid"] == expected
    for name in ("chmod", "chmod_g", "create", "mknod", "device"):
        assert outcomes[name] == errno.EPERM, (name, outcomes)
    for path in data.iterdir():
        info = path.lstat()
        assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID), path
        assert stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode), path
        if os.geteuid() == 0:
            assert info.st_uid != 0, path  # owned by the workload's user, never by root
    assert (data / "py").stat().st_mode & 0o7777 == 0o755


async def test_a_mount_the_workload_user_cannot_use_is_refused_before_anything_runs(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path, tmp_path: Path
) -> None:
    mine = shared_tmp / "mine"
    mine.mkdir(mode=0o555)  # readable by the workload's user, not writable
    with pytest.raises(InvalidRequest, match=r"cannot read and write .*os\.chown") as info:
        await probe(bwrap_sandbox, "pass", mounts=(Mount(str(mine), "/m", "rw"),))
    assert len(info.value.problems) == 1
    await probe(bwrap_sandbox, "pass", mounts=(Mount(str(mine), "/m", "ro"),))  # reading is fine
    if bwrap_sandbox.identity is not None:  # pytest's own 0700 base directory is root's alone
        with pytest.raises(InvalidRequest, match="out of reach"):
            await probe(bwrap_sandbox, "pass", mounts=(Mount(str(tmp_path), "/t", "ro"),))


# ---- links a workload leaves behind ------------------------------------------------------------


async def test_a_link_planted_by_one_run_never_redirects_a_later_mount(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    secret = shared_tmp / "secret"
    secret.mkdir()
    (secret / "token.txt").write_text("host secret")
    data = give_to_workload(bwrap_sandbox, shared_tmp / "data")
    planted = await probe(
        bwrap_sandbox,
        f"import os; os.symlink({str(secret)!r}, '/data/inputs'); os.symlink('/', '/data/root')",
        mounts=(Mount(str(data), "/data", "rw"),),
    )
    assert planted.result.ok, planted.result.stderr
    assert (data / "inputs").is_symlink()
    for source in (data / "inputs", data / "root", data / "inputs" / "token.txt"):
        with pytest.raises(InvalidRequest, match="symbolic link the workload") as info:
            await probe(
                bwrap_sandbox,
                "print(open('/inputs/token.txt').read())",
                mounts=(Mount(str(source), "/inputs", "ro"),),
            )
        assert f"{data}/" in info.value.problems[0]  # the error names the link
    # A link the workload's user could neither make nor replace is followed, as before.
    system = await probe(
        bwrap_sandbox,
        "import os; print(os.path.exists('/tools/sh'))",
        mounts=(Mount("/bin", "/tools", "ro"),),
    )
    assert system.stdout == "True\n"


async def test_a_mount_source_this_process_may_not_open_is_an_invalid_request(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Like /proc/<pid>/root of a process this one may not inspect: reading the link or opening
    # the path fails with EACCES, which escaped as a bare PermissionError, not a SandboxError.
    guarded = shared_tmp / "guarded"
    guarded.symlink_to("/usr")
    closed = shared_tmp / "closed"
    closed.mkdir()
    real_readlink, real_open = os.readlink, os.open

    def readlink(path: Any, *args: Any, **kwargs: Any) -> Any:
        if os.fspath(path) == "guarded":
            raise PermissionError(errno.EACCES, "Permission denied", "guarded")
        return real_readlink(path, *args, **kwargs)

    def open_(path: Any, *args: Any, **kwargs: Any) -> Any:
        if os.fspath(path) == "closed":
            raise PermissionError(errno.EACCES, "Permission denied", "closed")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", readlink)
    monkeypatch.setattr(os, "open", open_)
    for source, reason in ((guarded, "cannot be read"), (closed, "cannot be opened")):
        with pytest.raises(InvalidRequest, match=f"{reason}: Permission denied") as info:
            await run(
                bwrap_sandbox, SandboxRequest("/bin/true", mounts=(Mount(str(source), "/m"),))
            )
        assert str(source) in info.value.problems[0]
    assert bwrap_sandbox.owned() == OwnedResources()


# ---- nothing is left for another reaper ---------------------------------------------------------

#: The start of a script run as its own child subreaper: ``children()`` lists what it has left.
SUBREAPER_PRELUDE = """
import ctypes, os, sys, trio

PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def children():
    # This process's children: pid -> (state, command name), the name saying which one it is if
    # one is left.
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                name, rest = open(f"/proc/{entry}/stat").read().split("(", 1)[1].rsplit(")", 1)
            except (OSError, ValueError):
                continue
            fields = rest.split()
            if int(fields[1]) == os.getpid():
                found[int(entry)] = (fields[0], name)
    return found
"""

REAPER_SCRIPT = (
    SUBREAPER_PRELUDE
    + """
from sandbox import (
    UNLIMITED, BubblewrapSandbox, CodeExecutionRequest, HostCallSucceeded, LocalProcessSandbox,
    SandboxLimits, SandboxRequest, open_deno_executor, run,
)


class Echo:
    async def call(self, name, argument):
        return HostCallSucceeded(argument)


async def main():
    bwrap = BubblewrapSandbox()
    local = LocalProcessSandbox()
    lifted = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED, wall_clock_seconds=5)
    for index in range(100):
        result = await run(bwrap, SandboxRequest("/bin/true"))
        assert result.ok, result
    timeout = SandboxRequest("sleep", ("30",), limits=SandboxLimits(wall_clock_seconds=0.2))
    assert (await run(bwrap, timeout)).timed_out
    orphaning = SandboxRequest("sh", ("-c", "sleep 60 & exit 0"), network="host", limits=lifted)
    for index in range(5):
        assert (await run(local, orphaning)).ok
    async with open_deno_executor(warm=1) as deno:
        for index in range(5):
            source = f"async (t) => await t.echo({index})"
            result = await deno.execute(CodeExecutionRequest(source, allowed_host_calls=["echo"]), Echo())
            assert result.value == index
    print(sorted(children().items()))


trio.run(main)
"""
)


STALLED_SCRIPT = (
    SUBREAPER_PRELUDE
    + """
import sandbox._bwrap_execution as bwrap_execution
from sandbox import BubblewrapSandbox, SandboxLimits, SandboxRequest, run


# bwrap forks its sandbox init, and the run's wall clock passes before this process has read
# bwrap's report of it (on a loaded machine, before bwrap even made the report).
async def stalled_execution(self):
    await trio.lowlevel.wait_readable(self._status_read)
    await trio.sleep_forever()


bwrap_execution.BwrapExecution._child_pid = stalled_execution


async def main():
    slow = SandboxRequest("sleep", ("30",), limits=SandboxLimits(wall_clock_seconds=0.2))
    for index in range(3):
        assert (await run(BubblewrapSandbox(), slow)).timed_out
    print(sorted(children().items()))


trio.run(main)
"""
)


async def _children_left_by(script: str) -> bytes:
    """Run ``script`` (a subreaper prelude's) in a process of its own; what it printed: the
    children it has left."""
    done = await trio.run_process(
        [sys.executable, "-c", script],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout


async def test_a_sandbox_init_is_reaped_when_bwrap_is_stopped_before_it_is_read() -> None:
    """bwrap forks its sandbox init and reports its pid; a run whose wall clock passes before
    that report is read still has the init reaped by a process that adopts orphans: none is left
    as a zombie."""
    assert await _children_left_by(STALLED_SCRIPT) == b"[]\n"


async def test_no_zombie_is_left_to_a_process_that_is_its_own_subreaper() -> None:
    """An application that is PID 1 or a child subreaper adopts every orphan below it: bwrap's
    sandbox init after each command, whatever a local workload left running. 100 bubblewrap
    executions (and more) later, it has no child left, alive or zombie."""
    assert await _children_left_by(REAPER_SCRIPT) == b"[]\n"

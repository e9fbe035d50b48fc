"""Isolation building blocks: host facts, bwrap argv, cgroups, rlimits, artifacts, process kill."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from sandbox import LimitNotEnforceable
from sandbox._bwrap_view import resolve_in_view
from sandbox._isolation import (
    CpuCgroup,
    MemoryCgroup,
    PidsCgroup,
    ProcessLimits,
    apply_rlimits,
    bwrap_argv,
    kill_process_group,
    probe_host,
    rlimit_preexec,
    system_mounts,
)
from sandbox._posture import LIMIT_MEMORY
from sandbox._workload_files import remove_tree

from .conftest import PYTHON


def argv(network: bool = False, **kw: object) -> list[str]:
    args: dict[str, object] = {
        "bwrap": "bwrap",
        "ro_binds": [("/h/ro", "/ro")],
        "rw_binds": [("/h/rw", "/rw")],
        "tmpfs": (),
        "cwd": "/rw",
        "env": {"A": "1"},
        "network": network,
    }
    args.update(kw)
    return bwrap_argv(**args)  # type: ignore[arg-type]


def test_host_facts_are_detected() -> None:
    facts = probe_host()
    assert facts is probe_host()  # cached
    assert facts.bwrap is not None
    assert facts.user_namespaces
    if os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup/memory"):
        assert facts.cgroup_memory is not None  # this machine: cgroup v1, writable as root


def test_bwrap_argv_isolates_by_default() -> None:
    args = argv()
    assert args[:2] == ["bwrap", "--unshare-all"]
    assert "--share-net" not in args
    for flag in ("--die-with-parent", "--new-session", "--clearenv"):
        assert flag in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert args[args.index("--setenv") + 1 : args.index("--setenv") + 3] == ["A", "1"]
    assert args[args.index("--chdir") + 1] == "/rw"
    bound = {args[i + 1] for i, a in enumerate(args) if a in ("--ro-bind", "--bind")}
    for host_secret in ("/etc/passwd", "/etc/shadow", "/root", "/home", "/work", "/"):
        assert host_secret not in bound
    at = args.index("/proc/sys")
    assert args[at - 1 : at + 2] == ["--ro-bind", "/proc/sys", "/proc/sys"]
    root_ro = [i for i, a in enumerate(args) if a == "--remount-ro" and args[i + 1] == "/"]
    assert root_ro
    assert root_ro[0] > args.index("--bind")  # the root is read-only, the rw binds are not


def test_bwrap_argv_network_and_env_options() -> None:
    assert "--share-net" in argv(network=True)
    inherit = argv(env={}, clearenv=False)
    assert "--clearenv" not in inherit
    assert "--setenv" not in inherit
    kinds = {kind.split(":")[0] for kind, _ in system_mounts(True)}
    assert kinds <= {"bind", "symlink"}


def test_resolve_in_view_maps_through_the_mount_table(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (tmp_path / "data.txt").write_text("x")
    table = [("/usr", "/usr"), ("/opt/tools", str(tmp_path))]
    assert resolve_in_view("tool", "/usr/bin:/opt/tools", "/", table) == "/opt/tools/tool"
    assert resolve_in_view("./tool", "", "/opt/tools", table) == "/opt/tools/tool"
    assert resolve_in_view("data.txt", "/opt/tools", "/", table) is None  # not executable
    assert resolve_in_view(str(tool), "", "/", table) is None  # host path, not in the view
    assert resolve_in_view("sh", "/usr/bin", "/", table) == "/usr/bin/sh"


def test_memory_cgroup_lifecycle() -> None:
    if probe_host().cgroup_memory is None:
        with pytest.raises(LimitNotEnforceable) as info:
            MemoryCgroup.create(1 << 26)
        assert info.value.limit == LIMIT_MEMORY
        return
    group = MemoryCgroup.create(1 << 26)
    path = group.path
    assert os.path.isdir(path)
    child = subprocess.Popen(
        [PYTHON, "-c", "import time; time.sleep(30)"],
        preexec_fn=rlimit_preexec(ProcessLimits(), join_cgroups=[path]),
    )
    try:
        assert group.pids() == [child.pid]
        assert group.oom_killed() is False
    finally:
        group.close()  # kills what is left inside
        child.wait(timeout=5)
    assert child.returncode == -signal.SIGKILL
    assert not os.path.exists(path)
    group.close()  # idempotent


SPIN_0_2 = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"


def test_pids_and_cpu_cgroups() -> None:
    facts = probe_host()
    if facts.cgroup_pids is not None:
        group = PidsCgroup.create(3)
        assert group.limit_hits() == 0
        group.close()
        assert not os.path.exists(group.path)
    cpu = CpuCgroup.create()
    if facts.cgroup_cpu is None:
        assert cpu is None
        return
    assert cpu is not None
    try:
        subprocess.run(
            [
                PYTHON,
                "-c",
                "import time\nt=time.process_time()\nwhile time.process_time()-t<0.2: pass",
            ],
            preexec_fn=rlimit_preexec(ProcessLimits(), join_cgroups=[cpu.path]),
            check=True,
        )
        used = cpu.usage_seconds()
        assert used is not None
        assert 0.15 < used < 2
    finally:
        cpu.close()


def test_prefetched_counters_are_read_fresh_each_time() -> None:
    if probe_host().cgroup_cpu is None:
        assert CpuCgroup.create() is None
        return
    cpu = CpuCgroup.create()
    assert cpu is not None
    try:
        cpu.prefetch()  # opened before the workload runs, read after it
        assert cpu.usage_seconds() == 0
        subprocess.run(
            [PYTHON, "-c", SPIN_0_2],
            preexec_fn=rlimit_preexec(ProcessLimits(), join_cgroups=[cpu.path]),
            check=True,
        )
        used = cpu.usage_seconds()
        assert used is not None
        assert 0.15 < used < 2
        assert cpu.usage_seconds() == used
    finally:
        cpu.close()  # closes the counters too
    assert not os.path.exists(cpu.path)


def test_rlimits_in_the_child_and_on_a_running_process() -> None:
    limits = ProcessLimits(cpu_seconds=7, file_size_bytes=12345, open_files=64)
    code = "import resource as r; print(r.getrlimit(r.RLIMIT_CPU), r.getrlimit(r.RLIMIT_FSIZE))"
    out = subprocess.run(
        [PYTHON, "-c", code], preexec_fn=rlimit_preexec(limits), capture_output=True, check=True
    ).stdout
    assert out == b"(7, 8) (12345, 12345)\n"
    sleeper = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(30)"])
    try:
        apply_rlimits(sleeper.pid, limits)
        assert resource.prlimit(sleeper.pid, resource.RLIMIT_NOFILE) == (64, 64)
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_kill_process_group_kills_every_member_and_reaps() -> None:
    code = "import os, time\nos.fork()\nprint(os.getpid(), flush=True)\ntime.sleep(30)"
    process = await trio.lowlevel.open_process(
        [PYTHON, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdout is not None
    seen = b""
    while seen.count(b"\n") < 2:
        seen += await process.stdout.receive_some()
    pids = [int(p) for p in seen.split()]
    with trio.CancelScope() as scope:
        scope.cancel()  # shielded: completes even when the caller is already cancelled
        await kill_process_group(process)
    assert process.returncode == -signal.SIGKILL
    for pid in pids:  # kill_process_group returns once no member is alive
        assert pid_is_gone(pid)
    await kill_process_group(process)  # already dead: still fine
    await process.stdout.aclose()


def pid_is_gone(pid: int) -> bool:
    """No such process, or only a zombie left for init to reap (it was not our child)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_remove_tree_survives_hostile_permissions(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    locked = root / "locked"
    locked.mkdir(parents=True)
    (locked / "f").write_text("x")
    locked.chmod(0)
    remove_tree(str(root))
    assert not root.exists()
    remove_tree(str(root))  # absent: fine


async def test_kill_process_group_grace_lets_sigterm_handlers_finish() -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)"
    )
    process = await trio.lowlevel.open_process(
        [PYTHON, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdout is not None
    assert (await process.stdout.receive_some()).startswith(b"ready")
    await kill_process_group(process, grace=2.0)
    assert process.returncode == 3  # exited by its own handler, not SIGKILL
    await process.stdout.aclose()

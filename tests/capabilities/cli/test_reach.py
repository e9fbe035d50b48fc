"""The shell's workspace is checked at start-up against the sandbox's user: a tool that cannot
work is not offered to the model, and the command says what to do (issue #25, item 8)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.cli._reach import SandboxUser, workspace_reach
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, run_cli, serve
from .test_cli import args, shell_config, write_config

NOBODY = SandboxUser(65534, 65534, frozenset({65534}), "nobody (65534)")


def _info(mode: int, uid: int = 0, gid: int = 0, *, directory: bool = True) -> os.stat_result:
    kind = stat.S_IFDIR if directory else stat.S_IFREG
    return os.stat_result((kind | mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


def _tree(**modes: os.stat_result) -> dict[str, os.stat_result]:
    """Stats by path: ``root`` is ``/root`` and ``proj`` ``/root/proj``; ``/`` is 0755."""
    return {"/": _info(0o755), "/root": modes["root"], "/root/proj": modes["proj"]}


def test_root_s_home_is_out_of_nobody_s_reach() -> None:
    tree = _tree(root=_info(0o700), proj=_info(0o755))
    reach = workspace_reach("/root/proj", NOBODY, write=True, stat=tree.__getitem__)
    assert (reach.read, reach.write) == (False, False)
    assert reach.note(write=True) == (
        "shell and shell_write are not offered: the sandbox runs commands as nobody (65534), "
        "which cannot pass /root on the way to the workspace /root/proj; to offer them, give "
        "it the way (`chmod o+x /root`), set [shell] workspace to a directory it can reach "
        "(outside /root), or run effectagent as a user other than root"
    )


def test_a_workspace_nobody_may_read_but_not_write_keeps_shell_only() -> None:
    tree = _tree(root=_info(0o711), proj=_info(0o755))
    reach = workspace_reach("/root/proj", NOBODY, write=True, stat=tree.__getitem__)
    assert (reach.read, reach.write) == (True, False)
    note = reach.note(write=True)
    assert note is not None
    assert note.startswith("shell_write is not offered: the sandbox runs commands as nobody")
    assert "`chmod o+w /root/proj`, or chown it to 65534:65534" in note
    # Without shell_write asked for, nothing is missing.
    alone = workspace_reach("/root/proj", NOBODY, write=False, stat=tree.__getitem__)
    assert (alone.read, alone.write, alone.note(write=False)) == (True, False, None)


def test_a_workspace_of_the_user_itself_is_reached_through_the_owner_bits() -> None:
    tree = _tree(root=_info(0o700, uid=65534), proj=_info(0o700, uid=65534))
    reach = workspace_reach("/root/proj", NOBODY, write=True, stat=tree.__getitem__)
    assert (reach.read, reach.write, reach.note(write=True)) == (True, True, None)


def test_an_unreadable_workspace_is_left_out_with_the_chmod_that_fixes_it() -> None:
    tree = _tree(root=_info(0o755), proj=_info(0o711))
    reach = workspace_reach("/root/proj", NOBODY, write=False, stat=tree.__getitem__)
    assert (reach.read, reach.write) == (False, False)
    assert reach.note(write=False) == (
        "shell is not offered: the sandbox runs commands as nobody (65534), which cannot read "
        "the workspace /root/proj; to offer it, give it access (`chmod o+rx /root/proj`), set "
        "[shell] workspace to a directory it can read, or run effectagent as a user other than "
        "root"
    )


_MODES = st.integers(0, 0o777)
_OWNERS = st.sampled_from([0, 65534, 1000])


@given(
    st.tuples(_MODES, _OWNERS, _OWNERS),
    st.tuples(_MODES, _OWNERS, _OWNERS),
    st.tuples(_MODES, _OWNERS, _OWNERS),
    st.integers(0, 0o777),
    st.booleans(),
)
def test_more_permission_never_reaches_less(
    top: tuple[int, int, int],
    home: tuple[int, int, int],
    workspace: tuple[int, int, int],
    added: int,
    write: bool,
) -> None:
    """For all modes and owners of ``/``, ``/root`` and ``/root/proj``: adding permission bits
    anywhere never takes reach away, a tool is offered only when its access is there, and a
    tool left out always comes with a note."""
    paths = ("/", "/root", "/root/proj")
    parts = dict(zip(paths, (top, home, workspace), strict=True))
    before = {path: _info(*part) for path, part in parts.items()}
    for path, (mode, uid, gid) in parts.items():
        wider = {**before, path: _info(mode | added, uid, gid)}
        less = workspace_reach("/root/proj", NOBODY, write=write, stat=before.__getitem__)
        more = workspace_reach("/root/proj", NOBODY, write=write, stat=wider.__getitem__)
        assert less.read <= more.read
        assert less.write <= more.write
        assert less.write <= less.read <= (NOBODY.bits(before["/root/proj"]) & 0o5 == 0o5)
        assert less.write <= write
        left_out = not less.read or (write and not less.write)
        assert (less.note(write=write) is not None) == left_out


# ---- through the command, as root ------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


@pytest.fixture
def private_workspace() -> Iterator[Path]:
    """A workspace owned by root with mode 0700 — /root's situation in a container."""
    directory = Path(tempfile.mkdtemp(prefix="effectagent-private-"))
    directory.chmod(0o700)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox runs commands as nobody only for root")
def test_as_root_a_workspace_nobody_cannot_reach_offers_no_shell(
    server: ServerThread, tmp_path: Path, private_workspace: Path
) -> None:
    shell_config(tmp_path, private_workspace)
    server.script(Reply.sse(ChatWire().text("No shell here.")))
    done = run_cli([EFFECTAGENT, *args(server, "run", "List the files.")], cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "No shell here.\n"
    assert (
        "note: shell and shell_write are not offered: the sandbox runs commands as nobody "
        f"(65534), which cannot read the workspace {private_workspace}; to offer them, give it "
        f"access (`chmod o+rx {private_workspace}`)"
    ) in done.stderr
    (request,) = server.requests()
    offered = [tool["function"]["name"] for tool in request.json().get("tools", [])]
    assert "shell" not in offered
    assert "shell_write" not in offered


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox runs commands as nobody only for root")
def test_as_root_a_workspace_under_a_closed_directory_names_that_directory(
    server: ServerThread, tmp_path: Path, private_workspace: Path
) -> None:
    """The directory nobody cannot pass is the one the note says to go outside of — not
    /root, when the workspace is elsewhere."""
    workspace = private_workspace / "proj"
    workspace.mkdir(mode=0o755)
    shell_config(tmp_path, workspace)
    server.script(Reply.sse(ChatWire().text("No shell here.")))
    done = run_cli([EFFECTAGENT, *args(server, "run", "List the files.")], cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (
        f"which cannot pass {private_workspace} on the way to the workspace {workspace}; to "
        f"offer them, give it the way (`chmod o+x {private_workspace}`), set [shell] workspace "
        f"to a directory it can reach (outside {private_workspace}), or run effectagent as a "
        "user other than root"
    ) in done.stderr, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox runs commands as nobody only for root")
def test_code_mode_over_a_shell_left_out_says_why(tmp_path: Path, private_workspace: Path) -> None:
    write_config(tmp_path, f'[shell]\nworkspace = "{private_workspace}"\n\n[code_mode]\n')
    done = subprocess.run(
        [
            EFFECTAGENT,
            "run",
            "--model",
            "openai-compatible:m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "Hi",
        ],
        env=cli_env(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "[code_mode] has no readonly tool to offer: shell is not offered: the sandbox runs" in (
        done.stderr
    )

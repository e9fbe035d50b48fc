"""Artifact collection over trees a workload shaped: no link followed, every bound held, cancellable.

The collector is exercised directly on host trees (with a fake clock for the time bound) and end to
end through bubblewrap, where the hostile tree is built by the workload itself.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import trio

from sandbox import ArtifactRule, BubblewrapSandbox, Mount, SandboxLimits, SandboxRequest, run
from sandbox._command import LIMIT_ARTIFACTS
from sandbox._workload_files import ArtifactCollector, collect_artifacts

from .conftest import give_to_workload

ROOT = "/workspace"


def collector(root: Path, *rules: ArtifactRule, **limits: float) -> ArtifactCollector:
    return ArtifactCollector(rules, {None: (ROOT, str(root))}, SandboxLimits(**limits))  # type: ignore[arg-type]


def finish(collecting: ArtifactCollector) -> None:
    while not collecting.step():
        pass


def link_maze(root: Path) -> None:
    """The tree of the issue: links to the directory itself and to the host's root."""
    (root / "sub").mkdir()
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    (root / "loop").symlink_to(".")
    (root / "sub" / "up").symlink_to("..")
    (root / "r").symlink_to("/")
    (root / "passwd.txt").symlink_to("/etc/passwd")


def test_links_are_never_followed(tmp_path: Path) -> None:
    link_maze(tmp_path)
    collecting = collector(tmp_path, ArtifactRule("**"))
    finish(collecting)
    found = collecting.result()
    assert {a.path: a.content for a in found.artifacts} == {
        f"{ROOT}/a.txt": b"a",
        f"{ROOT}/sub/b.txt": b"b",
    }
    assert found.skipped == 4  # the four links, each matched once and refused
    assert found.stopped is None


def test_content_is_bounded_and_hashed_whole(tmp_path: Path) -> None:
    (tmp_path / "big.log").write_bytes(b"0123456789")
    collecting = collector(tmp_path, ArtifactRule("*.log", max_bytes=4))
    finish(collecting)
    (artifact,) = collecting.result().artifacts
    assert (artifact.content, artifact.size, artifact.truncated) == (b"0123", 10, True)
    assert artifact.sha256 == hashlib.sha256(b"0123456789").hexdigest()
    assert "0123" not in repr(artifact)


def test_rules_apply_in_order_without_collecting_twice(tmp_path: Path) -> None:
    for name in ("f1.out", "f2.out", "f3.out"):
        (tmp_path / name).write_text(name)
    collecting = collector(
        tmp_path, ArtifactRule("*.out", max_count=2), ArtifactRule("f*", max_count=5)
    )
    finish(collecting)
    found = collecting.result()
    assert [os.path.basename(a.path) for a in found.artifacts] == ["f1.out", "f2.out", "f3.out"]
    assert found.skipped == 1  # f3 over the first rule's count; the second rule took it


def test_a_fifo_is_skipped_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "file.txt").write_text("x")
    collecting = collector(tmp_path, ArtifactRule("*.txt"))
    finish(collecting)
    assert [a.path for a in collecting.result().artifacts] == [f"{ROOT}/file.txt"]
    assert collecting.result().skipped == 1


def test_directories_no_rule_can_match_are_not_entered(tmp_path: Path) -> None:
    deep = tmp_path / "node_modules"
    for index in range(300):
        (deep / str(index)).mkdir(parents=True)
    (tmp_path / "result.json").write_text("{}")
    collecting = collector(tmp_path, ArtifactRule("*.json"), artifact_entries=10)
    finish(collecting)
    assert collecting.result().stopped is None  # only the top directory was listed
    assert len(collecting.result().artifacts) == 1


@pytest.mark.parametrize(
    ("limits", "stopped_by"),
    [
        ({"artifact_entries": 50}, "artifact_entries"),
        ({"artifact_depth": 3}, "artifact_depth"),
        ({"artifact_bytes": 5}, "artifact_bytes"),
    ],
)
def test_a_hostile_tree_stops_at_a_bound_with_what_was_collected(
    tmp_path: Path, limits: dict[str, int], stopped_by: str
) -> None:
    (tmp_path / "a.txt").write_text("abc")
    level = tmp_path
    for _ in range(10):  # ten levels, twenty files each
        level = level / "d"
        level.mkdir()
        for name in range(20):
            (level / f"{name}.txt").write_text("x" * 3)
    collecting = collector(tmp_path, ArtifactRule("**/*.txt", max_count=1000), **limits)
    finish(collecting)
    found = collecting.result()
    assert found.stopped is not None
    assert found.stopped.limit == stopped_by
    assert found.stopped.bound == limits[stopped_by]
    assert found.stopped.path.startswith(ROOT)
    assert found.artifacts[0].path == f"{ROOT}/a.txt"  # what came before the bound is kept


def test_the_time_bound_is_kept(tmp_path: Path) -> None:
    for index in range(5):
        (tmp_path / f"{index}.txt").write_text("x")
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # each unit of work takes a (simulated) second
        return now[0]

    collecting = ArtifactCollector(
        (ArtifactRule("*.txt"),),
        {None: (ROOT, str(tmp_path))},
        SandboxLimits(artifact_seconds=6.5),
        clock=clock,
    )
    finish(collecting)
    found = collecting.result()
    assert found.stopped is not None
    assert found.stopped.limit == "artifact_seconds"
    assert 1 <= len(found.artifacts) < 5


async def test_a_cancelled_collection_resumes_where_it_stopped(tmp_path: Path) -> None:
    for index in range(50):
        (tmp_path / f"{index:02}.bin").write_bytes(os.urandom(256 << 10))  # 12.5 MiB in all
    collecting = collector(tmp_path, ArtifactRule("*.bin", max_count=100))
    with trio.CancelScope() as scope:
        scope.cancel()
        await collect_artifacts(collecting)  # cancelled before its first step
    assert scope.cancelled_caught
    assert not collecting.done
    found = await collect_artifacts(collecting)
    assert len(found.artifacts) == 50
    assert found.stopped is None
    collecting.close()


# ---- end to end: the workload builds the maze -----------------------------------------------


async def test_a_symlink_maze_in_the_workdir_is_collected_safely(
    bwrap_sandbox: BubblewrapSandbox,
) -> None:
    script = (
        "mkdir sub && echo a > a.txt && echo b > sub/b.txt && "
        "ln -s . loop && ln -s / r && ln -s .. sub/up && ln -s /etc/passwd passwd.txt"
    )
    request = SandboxRequest("sh", ("-c", script), artifacts=(ArtifactRule("**"),))
    with trio.fail_after(10):  # before, this walk never ended
        result = await run(bwrap_sandbox, request)
    assert result.ok, result
    assert {a.path: a.content for a in result.artifacts} == {
        f"{ROOT}/a.txt": b"a\n",
        f"{ROOT}/sub/b.txt": b"b\n",
    }
    assert result.artifacts_skipped == 4
    assert all(b"root:" not in a.content for a in result.artifacts)


async def test_a_tree_over_a_bound_is_reported_with_the_workloads_own_outcome(
    bwrap_sandbox: BubblewrapSandbox, shared_tmp: Path
) -> None:
    out = give_to_workload(bwrap_sandbox, shared_tmp / "out")
    script = (
        "echo first > /out/a.txt; mkdir -p /out/d/d/d/d/d/d && echo deep > /out/d/d/d/d/d/d/x.txt"
    )
    request = SandboxRequest(
        "sh",
        ("-c", script + "; echo done"),
        mounts=(Mount(str(out), "/out", "rw"),),
        artifacts=(ArtifactRule("**/*.txt", root="/out"),),
        limits=SandboxLimits(artifact_depth=3),
    )
    result = await run(bwrap_sandbox, request)
    assert (result.exit_code, result.stdout) == (0, b"done\n")  # nothing of the outcome is lost
    assert result.artifacts_stopped is not None
    assert result.artifacts_stopped.limit == "artifact_depth"
    assert [a.path for a in result.artifacts] == ["/out/a.txt"]
    assert LIMIT_ARTIFACTS in result.limits_hit
    assert not result.ok

"""Typed end to end, where a user touches the library: mypy judges the typing cases as annotated.

The modules in ``cases/`` are checked by one mypy run, under the project's own strict
configuration (``pyproject.toml``, which keeps them out of ``make typecheck``), with its cache in a
temporary directory that later runs reuse. A comment line ``# E: <text>`` says that mypy must
report an error containing ``<text>`` on the next line of code; no other line of a case may get
one, so every ``assert_type`` in them holds. Erasing a type the cases pin (a handler typed
``Callable[[Any, ...], Awaitable[Any]]``, ``Agent.output: type[Any]``, ``RunResult.output: Any``)
fails them: an expected error goes missing, or an ``assert_type`` does not hold.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "cases"
CASE_FILES = sorted(path for path in CASES.glob("*.py") if path.name != "__init__.py")

EXPECTED = re.compile(r"^\s*#\s*E:\s*(?P<text>.+?)\s*$")
REPORTED = re.compile(r"^(?P<path>.+?):(?P<line>\d+): error: (?P<message>.*)$")


def expected_errors(source: str) -> dict[int, list[str]]:
    """Line number -> the texts that errors on that line must contain: the ``# E: <text>``
    comment lines just above it."""
    found: dict[int, list[str]] = {}
    pending: list[str] = []
    for number, line in enumerate(source.splitlines(), 1):
        match = EXPECTED.match(line)
        if match:
            pending.append(match["text"])
        elif pending and line.strip() and not line.lstrip().startswith("#"):
            found[number] = pending
            pending = []
    if pending:
        raise ValueError(f"'# E: {pending[0]}' at the end of the case expects no line")
    return found


def reported_errors(output: str, path: Path) -> dict[int, list[str]]:
    """Line number -> the error messages mypy reported for ``path`` (notes left out)."""
    found: dict[int, list[str]] = {}
    for line in output.splitlines():
        match = REPORTED.match(line)
        if match and Path(match["path"]).resolve() == path.resolve():
            found.setdefault(int(match["line"]), []).append(match["message"])
    return found


def mismatches(
    expected: Mapping[int, Iterable[str]], reported: Mapping[int, Iterable[str]]
) -> list[str]:
    """What differs between the expected errors and those reported, one sentence each: an
    expected text no error on its line contains, an error no expected text of its line is in."""
    problems: list[str] = []
    for line in sorted(expected.keys() | reported.keys()):
        wanted = list(expected.get(line, ()))
        messages = list(reported.get(line, ()))
        for want in wanted:
            if not any(want in message for message in messages):
                got = " | ".join(messages) or "none"
                problems.append(f"line {line}: expected an error containing {want!r}, got: {got}")
        for message in messages:
            if not any(want in message for want in wanted):
                problems.append(f"line {line}: unexpected error: {message}")
    return problems


def _cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"effectagent-typing-cases-{os.getuid()}"


def run_mypy(paths: Iterable[str]) -> str:
    """What mypy reports of ``paths`` with the project's configuration and this suite's cache,
    a line per error; fails the test when mypy itself failed (exit 2)."""
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(_cache_dir()),
        "--no-error-summary",
        "--no-pretty",
        "--no-color-output",
        "--show-error-codes",
        *paths,
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # 1: errors found; 2: mypy itself failed
        pytest.fail(f"mypy failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


@pytest.fixture(scope="module")
def mypy_output() -> str:
    """One mypy run over every case (the cache makes repeated runs take seconds)."""
    return run_mypy(str(path.relative_to(ROOT)) for path in CASE_FILES)


def test_the_cases_are_there() -> None:
    """Each case pins types (``assert_type``) and expects rejections (``# E:``)."""
    assert {path.stem for path in CASE_FILES} >= {"runs", "tools"}
    for path in CASE_FILES:
        source = path.read_text()
        assert "assert_type(" in source, path.name
        assert expected_errors(source), path.name


@pytest.mark.parametrize("case", CASE_FILES, ids=lambda path: path.stem)
def test_mypy_judges_each_case_as_annotated(case: Path, mypy_output: str) -> None:
    problems = mismatches(expected_errors(case.read_text()), reported_errors(mypy_output, case))
    assert not problems, f"{case.relative_to(ROOT)}:\n" + "\n".join(problems)


# ---- the comparison itself (no mypy) -------------------------------------------------------------


def test_an_e_comment_expects_an_error_on_the_next_line_of_code() -> None:
    source = "\n".join(
        [
            "x = 1",
            "# E: Incompatible types  [assignment]",
            "y: str = 2",
            "# E: first",
            "#    (an explanation)",
            "",
            "# E: second",
            "z: int = f()",
        ]
    )
    assert expected_errors(source) == {
        3: ["Incompatible types  [assignment]"],
        8: ["first", "second"],
    }
    with pytest.raises(ValueError, match="expects no line"):
        expected_errors("x = 1\n# E: nothing after")


def test_reported_errors_are_those_of_the_file_without_notes(tmp_path: Path) -> None:
    case = tmp_path / "case.py"
    output = "\n".join(
        [
            f"{case}:3: error: Bad thing  [misc]",
            f"{case}:3: note: See here",
            f"{tmp_path / 'other.py'}:3: error: Elsewhere  [misc]",
            f"{case}:7: error: Another  [arg-type]",
        ]
    )
    assert reported_errors(output, case) == {3: ["Bad thing  [misc]"], 7: ["Another  [arg-type]"]}


def test_missing_unexpected_and_different_errors_are_each_a_mismatch() -> None:
    expected = {2: ["Incompatible types"], 5: ["has no attribute"]}
    assert mismatches(expected, {2: ["Incompatible types in assignment"], 5: ["x"]}) == [
        "line 5: expected an error containing 'has no attribute', got: x",
        "line 5: unexpected error: x",
    ]
    assert mismatches(expected, {2: ["Incompatible types"], 9: ["Revealed"]}) == [
        "line 5: expected an error containing 'has no attribute', got: none",
        "line 9: unexpected error: Revealed",
    ]
    assert mismatches(expected, {2: ["Incompatible types", "Other"], 5: ["has no attribute"]}) == [
        "line 2: unexpected error: Other"
    ]
    assert mismatches(expected, {2: ["Incompatible types"], 5: ["has no attribute 'x'"]}) == []

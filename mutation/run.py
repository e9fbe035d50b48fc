"""Mutation testing of the security- and correctness-critical modules, with mutmut.

Run by ``make mutate`` (with the interpreter of ``.venv-mutate``, where mutmut is installed):

    python mutation/run.py [--jobs N] [--report] [module ...]

For each module of ``mutation/modules.toml`` (or those named), mutmut runs in a work directory of
its own, ``.mutate/<name>/``: links to the packages and the tests, and a ``setup.cfg`` that
mutates that one file and runs only that module's tests. The work directory is made afresh each
time, so no result is reused from a run of older code.

The report gives, per module, the mutants killed of all made, and lists each surviving mutant
(file:line, function, the line before and after) — except those ``mutation/equivalent.md``
accepts as equivalent, which are listed apart with their reason. Timeouts and crashes count as
killed (the tests noticed); mutants no listed test calls count as survivors.

Exit status: 0 when every survivor is listed as equivalent, 1 otherwise, 2 when mutmut itself
failed (its log is in the work directory). ``--report`` prints the last run's report again,
with ``equivalent.md`` as it is now, and runs nothing.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "mutation"
WORK = ROOT / ".mutate"
LINKED = ("effectagent", "capabilities", "sandbox", "tests", "pyproject.toml")
# mutmut's statuses: what the tests noticed, and what they did not.
DETECTED = frozenset({"killed", "timeout", "segfault", "caught by type check"})
_STATUS = re.compile(r"^\s*(?P<name>\S+): (?P<status>.+)$")
_HUNK = re.compile(r"^@@ -(?P<start>\d+)")
_EQUIVALENT = re.compile(
    r"^- ``(?P<file>[^`]+)`` ``(?P<function>[^`]+)``: ``(?P<before>.*?)`` -> ``(?P<after>.*?)``"
    r" — (?P<reason>.+)$"
)


@dataclass(frozen=True)
class Module:
    name: str
    path: str
    tests: tuple[str, ...]
    fresh: bool  # each test run in a fresh fork of a process that only collected the tests


@dataclass(frozen=True)
class Mutant:
    name: str
    status: str
    function: str  # Class.method or function
    line: int  # in the original file (0 when it could not be placed)
    before: str  # the original line, stripped
    after: str  # the mutated line, stripped (empty when the line was removed)


@dataclass(frozen=True)
class Equivalent:
    file: str
    function: str
    before: str
    after: str
    reason: str


def load_modules() -> list[Module]:
    data = tomllib.loads((HERE / "modules.toml").read_text("utf-8"))
    return [
        Module(m["name"], m["path"], tuple(m["tests"]), m.get("fresh_process", False))
        for m in data["module"]
    ]


def load_equivalents() -> list[Equivalent]:
    """The entries of ``equivalent.md``: one list item a mutant (see that file's header)."""
    found = []
    for line in (HERE / "equivalent.md").read_text("utf-8").splitlines():
        match = _EQUIVALENT.match(line)
        if match:
            found.append(Equivalent(**match.groupdict()))
    return found


def _setup_cfg(module: Module, tests: list[str]) -> str:
    selection = "".join(f"\n    {t}" for t in tests)
    if module.fresh:
        # Each mutant's tests run in a fresh fork of a process that only collected them; a
        # mutant that loops forever is stopped after (its tests' time + 10 s) x 2 of wall time.
        isolation = "process_isolation = forkserver\ntimeout_constant = 10\n"
    else:
        # Forked from the process that ran the tests for mutmut's statistics (faster); a mutant
        # that loops forever is stopped after (its tests' time + 2 s) x 4 of CPU time.
        isolation = "process_isolation = fork\ntimeout_constant = 2\n"
    return (
        "[mutmut]\n"
        "source_paths =\n    effectagent\n    capabilities\n"
        f"only_mutate = {module.path}\n"
        f"pytest_add_cli_args_test_selection ={selection}\n"
        # mutmut's default multiplier, 15, lets each looping mutant hold a worker for minutes.
        "timeout_multiplier = 2\n"
        f"{isolation}"
        "pytest_add_cli_args =\n    -pno:cacheprovider\n    -pmutate_profile\n    -q\n"
    )


def _mutmut(work: Path, *args: str, log: Path | None = None) -> str:
    """Run mutmut (beside this interpreter) in ``work``; its output, or the log it went to."""
    command = [str(Path(sys.executable).parent / "mutmut"), *args]
    # The "mutate" hypothesis profile, from the plugin beside this file (see mutate_profile.py).
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "HYPOTHESIS_PROFILE": "mutate", "PYTHONPATH": path}
    if log is None:
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"mutmut {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout
    with log.open("w") as out:
        code = subprocess.run(command, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code.returncode:
        raise RuntimeError(f"mutmut {' '.join(args)} failed; its output is in {log}")
    return ""


def _functions(source: str) -> dict[str, int]:
    """The line of each function's ``def``, by mutmut's name for it (``x_f``, ``xǁClassǁm``)."""
    lines: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines[f"x_{node.name}"] = node.lineno
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines[f"xǁ{node.name}ǁ{item.name}"] = item.lineno
    return lines


def _readable(mangled: str) -> str:
    return (
        mangled.removeprefix("x_") if mangled.startswith("x_") else ".".join(mangled.split("ǁ")[1:])
    )


# ``mutmut show`` for many mutants in one process (it is one interpreter start per mutant).
_SHOW = """
import sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path = sys.argv[1]
for name in sys.argv[2:]:
    print("\\0" + name)
    print(get_diff_for_mutant(name, path=path))
"""


def _diffs(work: Path, path: str, names: list[str]) -> dict[str, list[str]]:
    """The diff of each mutant's function (mutmut's own, as ``mutmut show`` prints it)."""
    if not names:
        return {}
    command = [sys.executable, "-c", _SHOW, path, *names]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the diffs of the mutants could not be read:\n{done.stderr}")
    diffs: dict[str, list[str]] = {}
    for chunk in done.stdout.split("\0")[1:]:
        name, _, diff = chunk.partition("\n")
        diffs[name] = diff.splitlines()
    return diffs


def describe(name: str, status: str, diff: list[str], defs: dict[str, int]) -> Mutant:
    """Where a mutant is and what it changed, from the diff of its function."""
    mangled = name.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    start = defs.get(mangled, 0)
    line, before, after, offset = 0, "", "", 0
    for text in diff:
        hunk = _HUNK.match(text)
        if hunk:
            offset = int(hunk["start"])
            continue
        if text.startswith(("---", "+++")) or offset == 0:
            continue
        if text.startswith("-") and not before:
            before = text[1:].strip()
            line = start + offset - 1 if start else 0
        elif text.startswith("+") and not after:
            after = text[1:].strip()
        if not text.startswith("+"):
            offset += 1
    return Mutant(name, status, _readable(mangled), line, before, after)


def run_module(module: Module, jobs: int, *, again: bool) -> tuple[int, list[Mutant]]:
    """Mutate ``module``: (how many mutants were made, the ones its tests did not detect).
    ``again``: report the results of the last run instead (nothing is run)."""
    work = WORK / module.name
    if not again:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for name in LINKED:
            (work / name).symlink_to(ROOT / name)
        tests = [t for t in module.tests if (ROOT / t.split("::")[0]).exists()]
        (work / "setup.cfg").write_text(_setup_cfg(module, tests), "utf-8")
        _mutmut(work, "run", "--max-children", str(jobs), log=work / "mutmut.log")
    elif not (work / "mutants").is_dir():
        raise RuntimeError(f"{module.name} has not been mutated yet: run without --report")
    statuses = []
    for text in _mutmut(work, "results", "--all", "true").splitlines():
        match = _STATUS.match(text)
        if match:
            statuses.append((match["name"], match["status"]))
    defs = _functions((ROOT / module.path).read_text("utf-8"))
    missed = [(name, status) for name, status in statuses if status not in DETECTED]
    diffs = _diffs(work, module.path, [name for name, _ in missed])
    undetected = [describe(name, status, diffs[name], defs) for name, status in missed]
    return len(statuses), undetected


def _is(equivalent: Equivalent, module: Module, mutant: Mutant) -> bool:
    return (
        equivalent.file == module.path
        and equivalent.function == mutant.function
        and equivalent.before == mutant.before
        and equivalent.after == mutant.after
    )


def _show(module: Module, mutant: Mutant) -> str:
    where = f"{module.path}:{mutant.line}" if mutant.line else module.path
    status = "" if mutant.status == "survived" else f" [{mutant.status}]"
    return (
        f"  {where}  {mutant.function}{status}\n"
        f"      - {mutant.before or '(nothing)'}\n"
        f"      + {mutant.after or '(removed)'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="names from mutation/modules.toml (all if none)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument(
        "--report",
        action="store_true",
        help="report the last run again (after editing equivalent.md)",
    )
    args = parser.parse_args()
    modules = load_modules()
    unknown = set(args.modules) - {m.name for m in modules}
    if unknown:
        parser.error(f"no module named {', '.join(sorted(unknown))} in mutation/modules.toml")
    chosen = [m for m in modules if not args.modules or m.name in args.modules]
    equivalents = load_equivalents()
    used: set[Equivalent] = set()
    rows, survivors, accepted = [], [], []
    began = time.monotonic()
    for module in chosen:
        print(f"== {'reading' if args.report else 'mutating'} {module.path} ...", flush=True)
        clock = time.monotonic()
        try:
            total, undetected = run_module(module, args.jobs, again=args.report)
        except RuntimeError as error:
            print(error, file=sys.stderr)
            return 2
        mine = []
        for mutant in undetected:
            match = next((e for e in equivalents if _is(e, module, mutant)), None)
            if match is None:
                survivors.append(_show(module, mutant))
            else:
                used.add(match)
                mine.append(mutant)
                accepted.append(f"{_show(module, mutant)}\n      — {match.reason}")
        killed = total - len(undetected)
        rows.append((module, total, killed, len(undetected) - len(mine), len(mine)))
        print(f"   done in {time.monotonic() - clock:.0f} s", flush=True)
    print()
    took = "the last run" if args.report else f"{time.monotonic() - began:.0f} s"
    print(f"Mutation testing (mutmut), {args.jobs} worker(s), {took}")
    print(f"{'module':40} {'killed / total':>15} {'%':>7} {'survived':>9} {'equivalent':>11}")
    for module, total, killed, survived, equivalent in rows:
        share = 100 * killed / total if total else 100.0
        print(
            f"{module.path:40} {killed:>7} / {total:<5} {share:6.1f}% {survived:>9} {equivalent:>11}"
        )
    print()
    print(f"Surviving mutants ({len(survivors)}):" if survivors else "Surviving mutants: none")
    print("\n".join(survivors))
    if accepted:
        print()
        print(f"Equivalent (mutation/equivalent.md) ({len(accepted)}):")
        print("\n".join(accepted))
    checked = {m.path for m in chosen}
    stale = [e for e in equivalents if e.file in checked and e not in used]
    if stale:
        print()
        print("Listed as equivalent but no longer surviving (remove from mutation/equivalent.md):")
        for e in stale:
            print(f"  {e.file}  {e.function}: {e.before} -> {e.after}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())

"""effectagent against other Python agent frameworks: the same four runs, µs per run, side by side.

Run with ``make bench-peers`` (or ``.venv/bin/python benchmarks/peers.py``; ``--quick`` for a fast,
noisier smoke run, ``--json`` for machine-readable figures). It is not part of ``make bench``: the
first run installs each peer into a virtualenv of its own, and the full run takes a few minutes.

What is measured
----------------
Three frameworks run four scenarios, each with an offline model (no network, no model time) and
one async no-op tool (``ping(n: int) -> int``, which returns its argument):

* **a** — a tool-free answer: one model request, the answer;
* **b** — one tool call, then the answer: two model requests;
* **c** — ten tool calls in one response (run concurrently), then the answer: two requests;
* **d** — ten turns of one call each, then the answer: eleven requests.

What is timed is one whole run through each framework's normal entry point, start to result:
effectagent's ``runtime.run`` under ``trio.run``, pydantic-ai's ``agent.run`` and openai-agents'
``Runner.run`` under ``asyncio.run``. The model is each framework's own offline facility running
the same script: effectagent's ``effectagent.testing.FunctionModel``, pydantic-ai's
``FunctionModel``, and for openai-agents — which has no function model — a few lines implementing
its ``Model`` interface. Each builds its response, per request, from the request it is sent: it
counts the tool results in it and asks for the scenario's next calls or gives the answer, with a
fixed token usage (so no framework estimates tokens). Every model declares each tool call whole,
as a response that is not streamed does: the peers' models cannot stream a call's arguments in
deltas, so effectagent's does not either. The drivers are in ``benchmarks/_peers/``.

How
---
* **Own virtualenvs.** pydantic-ai (``pydantic-ai-slim``, which has ``FunctionModel``) and
  openai-agents are pinned below and installed, only when missing, into ``.venv-peers/<name>``
  (git-ignored), from the package registry; effectagent runs in the project's ``.venv``. All use
  the same Python.
* **One driver process per framework**, started once and kept: ``peers.py`` sends it a command
  line per batch and reads back the batch's wall and CPU time as JSON (``_peers/_protocol.py``).
  Each driver checks its own work after every batch — every run's answer, and the counts of
  model requests and tool calls against the scenario — and fails loudly on a mismatch.
* **Warm-up**, then batch sizes: every framework runs every scenario twice untimed (imports,
  schema building, caches), and from the second pass each (framework, scenario) gets the number
  of runs that fills about ``--batch-seconds``. Then each driver freezes what warming up left in
  the garbage collector (``gc.freeze``), the same for all.
* **Interleaved rounds.** One round is one batch of every framework for scenario a, then b, c, d;
  the frameworks' order rotates from round to round. A batch's time divided by its runs is one
  sample (µs per run). This machine's speed drifts by up to 2x over minutes: interleaving makes
  the drift hit every framework alike, and every ratio is computed *within* a round, from batches
  taken a second or so apart.
* **Report**: per scenario and framework the median over the rounds of µs per run (wall clock;
  CPU time of the driver process beside it, which a loaded machine disturbs less), each
  framework's ratio to the round's fastest, the ratio slowest/fastest, and how many times faster
  effectagent is than the faster of the two peers. Ratios are medians of the per-round ratios.

What it does not say: a real model takes milliseconds to seconds per request, so in a real agent
these differences are the framework's share of the CPU, not of the latency a user sees.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path: the project root goes before it.
sys.path.insert(0, str(REPO))

import attrs  # noqa: E402

from benchmarks._peers._protocol import SCENARIOS, Scenario  # noqa: E402

#: Where the peers' virtualenvs live (git-ignored).
PEER_VENVS: Final = REPO / ".venv-peers"
#: Runs of each scenario in each of the two warm-up passes.
WARM_UP_RUNS: Final = {"a": 20, "b": 10, "c": 5, "d": 3}
MIN_RUNS: Final = 3


@attrs.frozen
class Framework:
    """A framework under test: its driver module and, for a peer, the requirement installed into
    its own virtualenv (``None``: effectagent, in the project's virtualenv)."""

    name: str
    driver: str
    requirement: str | None = None

    @property
    def venv(self) -> Path:
        """The peer's virtualenv."""
        return PEER_VENVS / self.name


FRAMEWORKS: Final = (
    Framework("effectagent", "benchmarks._peers.drive_effectagent"),
    Framework("pydantic-ai", "benchmarks._peers.drive_pydantic_ai", "pydantic-ai-slim==2.68.0"),
    Framework("openai-agents", "benchmarks._peers.drive_openai_agents", "openai-agents==0.24.0"),
)


# ---- virtualenvs ---------------------------------------------------------------------------------


def python_of(framework: Framework) -> Path:
    """The interpreter that runs ``framework``'s driver, installing the peer first if its
    virtualenv is missing or holds another requirement (a stamp file records what was installed)."""
    if framework.requirement is None:
        return Path(sys.executable)
    python = framework.venv / "bin" / "python"
    stamp = framework.venv / ".installed"
    if python.exists() and stamp.exists() and stamp.read_text() == framework.requirement:
        return python
    print(f"installing {framework.requirement} into {framework.venv} ...", file=sys.stderr)
    install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    for step in (
        [sys.executable, "-m", "venv", "--clear", str(framework.venv)],
        [*install, framework.requirement],
    ):
        status = subprocess.run(step, check=False).returncode
        if status:
            raise DriverFailed(
                f"installing {framework.requirement} into {framework.venv} failed: "
                f"{' '.join(step[:4])} ... exited with status {status} (its output is above)"
            )
    stamp.write_text(framework.requirement)
    return python


# ---- drivers -------------------------------------------------------------------------------------


@attrs.frozen
class Sample:
    """One batch: µs per run, wall clock and the driver process's CPU time."""

    wall_us: float
    cpu_us: float


class DriverFailed(Exception):
    """A driver reported that its framework did not do the scenario's work, or it died."""


class Driver:
    """One framework's driver process, answering one command at a time."""

    def __init__(self, framework: Framework, python: Path) -> None:
        self.framework = framework
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # belt and braces: the driver disables it too
        self._process = subprocess.Popen(  # ``-m`` from the checkout: ``benchmarks`` imports
            [str(python), "-m", framework.driver],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.version = str(self._read()["version"])

    def _read(self) -> dict[str, Any]:
        stdout = self._process.stdout
        line = stdout.readline() if stdout is not None else ""
        if not line:
            status = self._process.wait()
            raise DriverFailed(f"the {self.framework.name} driver exited with status {status}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise DriverFailed(str(reply["error"]))
        return reply

    def ask(self, **command: object) -> dict[str, Any]:
        """Send one command and return its reply."""
        stdin = self._process.stdin
        assert stdin is not None
        with suppress(BrokenPipeError):  # a driver that died: _read says how it ended
            stdin.write(json.dumps(command) + "\n")
            stdin.flush()
        return self._read()

    def batch(self, scenario: Scenario, runs: int) -> Sample:
        """Run ``scenario`` ``runs`` times: the per-run figures."""
        reply = self.ask(do="batch", scenario=scenario.key, runs=runs)
        return Sample(float(reply["wall_us"]), float(reply["cpu_us"]))

    def close(self) -> None:
        """Close its stdin (the driver ends) and wait for it; kill it if it does not end."""
        if self._process.stdin is not None:
            with suppress(BrokenPipeError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


@contextmanager
def open_drivers(frameworks: Sequence[Framework]) -> Iterator[list[Driver]]:
    """A started driver per framework, closed on the way out."""
    pythons = [python_of(f) for f in frameworks]  # install everything before timing anything
    with ExitStack() as stack:
        drivers = []
        for framework, python in zip(frameworks, pythons, strict=True):
            driver = Driver(framework, python)
            stack.callback(driver.close)
            drivers.append(driver)
        yield drivers


# ---- measuring -----------------------------------------------------------------------------------


@attrs.frozen
class Plan:
    """How much to measure."""

    rounds: int
    batch_seconds: float


def warm_up(drivers: Sequence[Driver], plan: Plan) -> dict[tuple[str, str], int]:
    """Two untimed passes of every scenario on every driver; returns the runs per batch of each
    (framework, scenario), sized from the second pass to fill ``plan.batch_seconds``."""
    runs: dict[tuple[str, str], int] = {}
    for driver in drivers:
        for key, scenario in SCENARIOS.items():
            driver.batch(scenario, WARM_UP_RUNS[key])
            warm = driver.batch(scenario, WARM_UP_RUNS[key])
            per_batch = round(plan.batch_seconds * 1e6 / warm.wall_us)
            runs[driver.framework.name, key] = max(MIN_RUNS, per_batch)
        driver.ask(do="freeze")
    return runs


def measure(drivers: Sequence[Driver], plan: Plan) -> dict[tuple[str, str], list[Sample]]:
    """Warm up, then ``plan.rounds`` interleaved rounds: the samples of each (framework,
    scenario), sample ``i`` from round ``i``."""
    runs = warm_up(drivers, plan)
    samples: dict[tuple[str, str], list[Sample]] = {key: [] for key in runs}
    for round_ in range(plan.rounds):
        order = [drivers[(round_ + i) % len(drivers)] for i in range(len(drivers))]
        for key, scenario in SCENARIOS.items():
            for driver in order:
                name = driver.framework.name
                samples[name, key].append(driver.batch(scenario, runs[name, key]))
    return samples


# ---- figures (plain functions of the samples) ----------------------------------------------------


@attrs.frozen
class Row:
    """One scenario's figures. ``us`` and ``cpu_us``: median µs per run of each framework;
    ``to_fastest``: median over the rounds of each one's time over the round's fastest;
    ``spread``: median of slowest/fastest; ``lead``: median of (the faster peer's time) /
    (effectagent's time) — above 1, effectagent is that many times faster."""

    scenario: Scenario
    us: Mapping[str, float]
    cpu_us: Mapping[str, float]
    to_fastest: Mapping[str, float]
    spread: float
    lead: float


def row_of(scenario: Scenario, series: Mapping[str, Sequence[Sample]], ours: str) -> Row:
    """The figures of one scenario from its per-framework samples (aligned by round)."""
    names = list(series)
    peers = [name for name in names if name != ours]
    median = statistics.median
    rounds = [
        dict(zip(names, values, strict=True)) for values in zip(*series.values(), strict=True)
    ]
    to_fastest: dict[str, list[float]] = {name: [] for name in names}
    spread, lead = [], []
    for sample in rounds:
        wall = {name: s.wall_us for name, s in sample.items()}
        fastest, slowest = min(wall.values()), max(wall.values())
        for name in names:
            to_fastest[name].append(wall[name] / fastest)
        spread.append(slowest / fastest)
        lead.append(min(wall[p] for p in peers) / wall[ours])
    return Row(
        scenario,
        {name: median(s.wall_us for s in series[name]) for name in names},
        {name: median(s.cpu_us for s in series[name]) for name in names},
        {name: median(values) for name, values in to_fastest.items()},
        median(spread),
        median(lead),
    )


def rows_of(samples: Mapping[tuple[str, str], Sequence[Sample]], names: Sequence[str]) -> list[Row]:
    """A row per scenario; ``names[0]`` is effectagent."""
    return [
        row_of(scenario, {name: samples[name, key] for name in names}, names[0])
        for key, scenario in SCENARIOS.items()
    ]


def report(rows: Sequence[Row], versions: Mapping[str, str], plan: Plan) -> str:
    """The table, then the verdict line."""
    names = list(versions)
    cells = 22
    title = 34
    lines = [
        "peers — "
        + ", ".join(f"{name} {version}" for name, version in versions.items())
        + f"; Python {platform.python_version()} on {platform.machine()}",
        f"µs per run (wall clock), median of {plan.rounds} interleaved rounds of batches of "
        f"~{plan.batch_seconds:g} s; (xN) = times the round's fastest, median over the rounds",
        "",
        f"{'scenario':<{title}}"
        + "".join(f"{name:>{cells}}" for name in names)
        + "  slowest/fastest",
    ]
    for row in rows:
        line = f"{row.scenario.key}  {row.scenario.title:<{title - 3}}"
        for name in names:
            line += f"{f'{row.us[name]:,.0f} (x{row.to_fastest[name]:.1f})':>{cells}}"
        lines.append(f"{line}  {row.spread:>14.1f}x")
    lines += ["", f"{'CPU µs per run, median':<{title}}" + "".join(f"{n:>{cells}}" for n in names)]
    for row in rows:
        line = f"{row.scenario.key}  {row.scenario.title:<{title - 3}}"
        lines.append(line + "".join(f"{row.cpu_us[name]:>{cells},.0f}" for name in names))
    leads = ", ".join(f"{row.scenario.key} {row.lead:.1f}x" for row in rows)
    low, high = min(r.lead for r in rows), max(r.lead for r in rows)
    verdict = (
        f"{names[0]} is {low:.1f}x to {high:.1f}x faster than the fastest peer"
        if low > 1
        else f"{names[0]} is NOT faster than the fastest peer in every scenario"
    )
    lines += [
        "",
        f"{verdict} ({leads}; per round, the faster peer's time over {names[0]}'s, median over "
        "the rounds)",
    ]
    return "\n".join(lines)


def as_json(rows: Sequence[Row], versions: Mapping[str, str], plan: Plan) -> str:
    """The figures as JSON."""
    return json.dumps(
        {
            "python": platform.python_version(),
            "versions": dict(versions),
            "plan": attrs.asdict(plan),
            "scenarios": {
                row.scenario.key: {
                    "title": row.scenario.title,
                    "us_per_run": dict(row.us),
                    "cpu_us_per_run": dict(row.cpu_us),
                    "to_fastest": dict(row.to_fastest),
                    "slowest_over_fastest": row.spread,
                    "effectagent_lead": row.lead,
                }
                for row in rows
            },
        },
        indent=2,
    )


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the options, install what is missing, measure, print."""
    parser = argparse.ArgumentParser(
        description="effectagent against pydantic-ai and openai-agents."
    )
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds (default 21)")
    parser.add_argument(
        "--batch-seconds", type=float, default=0.3, help="wall time of one batch (default 0.3)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a fast smoke run: 5 rounds of 0.05 s batches"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    plan = Plan(5, 0.05) if args.quick else Plan(max(1, args.rounds), args.batch_seconds)
    try:
        with open_drivers(FRAMEWORKS) as drivers:
            versions = {d.framework.name: d.version for d in drivers}
            samples = measure(drivers, plan)
    except DriverFailed as error:
        print(f"peers: {error}", file=sys.stderr)
        return 1
    rows = rows_of(samples, list(versions))
    print((as_json if args.json else report)(rows, versions, plan))
    return 0


if __name__ == "__main__":
    sys.exit(cli())

"""The service's OpenTelemetry metrics, read with the SDK's in-memory metric reader: admissions
over HTTP, settlements, failures, latency, tokens, queue and settlement age, Unknown calls."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import trio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from capabilities.durable import DurableQueue, DurableWorker, WorkerOptions
from capabilities.serve import ServeApi, ServeMetrics, serve
from capabilities.storage import open_database
from effectagent.ai import ModelRequest, Usage
from effectagent.core import Agent
from effectagent.testing import FunctionModel, Turn

from .support import ANN, auth, settings

AGENT = Agent("assistant", "Answer.")
#: The checkout these tests belong to: the program it starts imports it first.
ROOT = Path(__file__).absolute().parents[3]


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def _value(points: list[Any], **attributes: str) -> Any:
    for point in points:
        if all(point.attributes.get(k) == v for k, v in attributes.items()):
            return getattr(point, "value", None) if hasattr(point, "value") else point
    raise AssertionError(f"no point with {attributes} in {points}")


async def test_metrics_follow_admissions_runs_and_the_ledger(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = ServeMetrics(provider.get_meter("test"))  # settlements from now on count

    def respond(request: ModelRequest) -> Turn:
        return Turn.text("fine", usage=Usage.of(11, 7))

    async with open_database(tmp_path / "serve.db") as database:
        queue = DurableQueue(database)
        # a submission waiting before the service starts: the queue's age is measured
        old = await queue.submit(
            "elsewhere", "x", conversation_id="c-old", idempotency_key="k", principal="ann"
        )
        api = ServeApi(database, settings(), agents=None, metrics=metrics)
        layer = FunctionModel.layer(respond) + metrics.listener()
        worker = DurableWorker(
            database, layer, [AGENT], options=WorkerOptions(poll_interval=0.02, lease=5.0)
        )
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(
                lambda task_status: serve(
                    api, stop, bind="127.0.0.1:0", worker=worker, task_status=task_status
                )
            )
            async with httpx2.AsyncClient(base_url=urls[0]) as client:
                answer = await client.post(
                    "/v1/conversations/c-1/submissions", json={"text": "hi"}, headers=auth(ANN)
                )
                submission = answer.json()["submission_id"]
                with trio.fail_after(30):
                    while True:  # both settled by the worker beside the server
                        done = await queue.status(submission)
                        failed = await queue.status(old.submission_id)
                        if done.status == "completed" and failed.status == "failed":
                            break
                        await trio.sleep(0.02)
            await metrics.refresh(database, queue)
            stop.set()
    points = _points(reader)
    assert _value(points["effectagent.serve.submissions"], **{"effectagent.principal": "ann"}) == 1
    assert _value(points["effectagent.runs"], status="completed") == 1
    # "elsewhere" is an agent the worker does not know: it settles failed
    assert _value(points["effectagent.runs"], status="failed") == 1
    assert points["effectagent.runs.failures"][0].value == 1
    duration = _value(points["effectagent.runs.duration"], status="completed")
    assert duration.count == 1
    assert _value(points["effectagent.runs.tokens"], direction="input") == 11
    assert _value(points["effectagent.runs.tokens"], direction="output") == 7
    assert points["effectagent.serve.admission.duration"][0].count == 1
    assert points["effectagent.tool_calls.unknown"][0].value == 0
    assert _value(points["effectagent.submissions.open"], status="queued") == 0
    assert points["effectagent.queue.age"][0].value == 0.0


def test_ages_are_measured_from_the_oldest_waiting_submission() -> None:
    from capabilities.serve._ledger import LedgerFigures

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = ServeMetrics(provider.get_meter("test"), clock=lambda: 1000.0)
    metrics.observe(LedgerFigures({"queued": 2, "suspended": 1}, 940.0, 900.0), 3, [])
    points = _points(reader)
    assert points["effectagent.queue.age"][0].value == 60.0
    assert points["effectagent.settlement.age"][0].value == 100.0
    assert points["effectagent.tool_calls.unknown"][0].value == 3
    assert _value(points["effectagent.submissions.open"], status="queued") == 2
    assert _value(points["effectagent.submissions.open"], status="suspended") == 1


def test_without_the_opentelemetry_api_the_service_serves_without_metrics() -> None:
    """As with the serve extra alone: ``opentelemetry`` cannot be imported (blocked here)."""
    program = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import capabilities.serve as serve\n"
        "from capabilities.cli._serve import serve as command\n"
        "assert not serve.metrics_available()\n"
        "try:\n"
        "    serve.ServeMetrics()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the service's metrics need the OpenTelemetry API")

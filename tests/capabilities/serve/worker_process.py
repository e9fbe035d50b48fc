"""A durable worker process for the serve tests: ``python -m
tests.capabilities.serve.worker_process DATABASE`` runs a :class:`DurableWorker` with the agent
and scripted model of ``support`` until nothing is left for a worker (a run waiting for a
decision counts as nothing left), then exits 0."""

from __future__ import annotations

import sys

import trio

from capabilities.durable import DurableWorker, WorkerOptions
from capabilities.storage import open_database
from effectagent.ai import Toolkit
from effectagent.testing import FunctionModel

from .support import AGENT, _delete, delete_file, respond


async def main(path: str) -> None:
    async with open_database(path) as database:
        layer = Toolkit(delete_file).handlers(delete_file.bind(_delete))
        layer = layer + FunctionModel.layer(respond)
        options = WorkerOptions(poll_interval=0.02, lease=5.0)
        await DurableWorker(database, layer, [AGENT], options=options).run(until_idle=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])

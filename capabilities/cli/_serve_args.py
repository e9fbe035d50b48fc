"""``effectagent serve``'s arguments. Light, as ``_args`` is (the standard library alone)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["serve"]

_EPILOG = """\
The [serve] table of the config file says who may call it (bearer tokens → principals), its
bounds and quotas; see docs/guides/serve.md. On SIGTERM or Ctrl-C it stops admitting (503),
readiness turns false, runs get [serve] grace seconds to finish, then the runs still going are
let go for the next worker (nothing is lost) and it exits 0.

exit status:
  0    stopped by SIGTERM or Ctrl-C
  2    bad arguments, or a [serve] table it cannot use
  3    the database, the model, the tools or the address could not be opened
"""


def serve(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``serve``."""
    parser = commands.add_parser(
        "serve",
        parents=[common],
        help="the durable runtime over HTTP, with an operator console",
        description="Serve the durable runtime over HTTP — submissions, their events as "
        "Server-Sent Events, approvals, abort, sessions and search — with a worker running the "
        "agent `assistant` (the model, instructions and tools of the configuration) and the "
        "operator console at /console.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where to listen (default: [serve] listen, else 127.0.0.1:8080; port 0: any free "
        "one, printed on start)",
    )
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="run no worker here (other processes run the submissions: effectagent admin worker)",
    )

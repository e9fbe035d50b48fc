"""What opening a database cleans up — only when the opener is alone with the file.

Processes share a database file (see ``_database``). Some of what a process leaves behind is
only its own while it lives: agent state its runs wrote as *pending* (to be compensated or
committed when they settle), steering and follow-ups *queued* for its runs, and the lanes its
plain runs hold. While it lives, no other process may touch these; once it is gone, nobody will
settle them. Telling "gone" from "busy" is what the file lock is for: a process opening the file
takes it exclusively if it can — then no other process has the file open, and everything of that
kind was left by processes that ended — and shares it otherwise. :func:`recover` is what the
exclusive opener does before it shares the lock like everyone else:

* pending agent state becomes *uncertain*, with the reason (its run never settled: whether its
  external effect was undone is unknown; the next run sees it in ``unsettled()``);
* queued steering and follow-ups expire (their runs are gone), their text cleared;
* lanes held by plain runs (no durable submission) are released, keeping their epochs;
* media bytes nothing refers to are deleted (``_sweep``), however recently they were put: no
  other process is between a put and the append that refers to it (the steering just expired
  no longer refers to its bytes either).

What a process that dies while others keep the file open leaves stays as it is until then: its
pending state stays pending and its queued steering queued (a run of another process never takes
input admitted for a run that has ended — see ``capabilities.steering``), and the lanes it held
free themselves when their leases run out. Durable work (``capabilities.durable``) is recovered by
the durable runtime's own recovery, from its ledger, whoever is alive.
"""

from __future__ import annotations

import time
from typing import Final

from ._port import Connection
from ._sweep import sweep_unreferenced

__all__ = ["STATE_REASON", "STEERING_REASON", "recover"]

#: Why pending agent state became uncertain.
STATE_REASON: Final = "its run never settled: the process ended first"
#: Why queued steering expired.
STEERING_REASON: Final = "the process ended before a run took it"


def recover(conn: Connection) -> dict[str, int]:
    """Clean up after processes that ended (see the module notes), inside the caller's write
    transaction; return how many agent state cells, steering inputs and lanes it changed and
    media digests' bytes it deleted (keys ``"state"``, ``"steering"``, ``"lanes"``,
    ``"media"``)."""
    state = conn.execute(
        "UPDATE agent_state SET status = 'uncertain', reason = ? WHERE status = 'pending'",
        (STATE_REASON,),
    ).rowcount
    steering = conn.execute(
        "UPDATE steering_inputs SET status = 'expired', text = NULL, reason = ? "
        "WHERE status = 'queued'",
        (STEERING_REASON,),
    ).rowcount
    lanes = conn.execute(
        "UPDATE lanes SET worker_id = NULL, lease_until = 0 "
        "WHERE submission_id IS NULL AND worker_id IS NOT NULL"
    ).rowcount
    media = sweep_unreferenced(conn, before=time.time())
    return {"state": state, "steering": steering, "lanes": lanes, "media": media}

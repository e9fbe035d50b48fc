"""Persistent agent state (CAP-012): typed slots apart from conversation history, with
optimistic revisions and four write classes the caller must choose between — run-local,
committed with a canonical record, external and compensatable, external and uncertain.

``capabilities.sqlite_storage`` and ``in_memory_storage`` provide the :data:`AgentStateService`.
Every error is an :class:`AgentStateError`; exported are those a caller handles differently: a
stale revision (:class:`StateConflict`) and a write for a run the store was not told of
(:class:`RunNotObserved`). An invalid or oversized value, a damaged or too-new cell and an
unavailable store (``is_retryable``) are ``AgentStateError``\\ s whose message says which."""

from ._model import AgentState as AgentState
from ._model import AgentStateError as AgentStateError
from ._model import AgentStateService as AgentStateService
from ._model import Compensatable as Compensatable
from ._model import RunLocal as RunLocal
from ._model import RunNotObserved as RunNotObserved
from ._model import StateConflict as StateConflict
from ._model import StateSlot as StateSlot
from ._model import StateView as StateView
from ._model import StateWritten as StateWritten
from ._model import Uncertain as Uncertain
from ._model import UnsettledState as UnsettledState
from ._model import WithRecord as WithRecord
from ._model import WriteClass as WriteClass

__all__ = [
    "AgentState",
    "AgentStateError",
    "AgentStateService",
    "Compensatable",
    "RunLocal",
    "RunNotObserved",
    "StateConflict",
    "StateSlot",
    "StateView",
    "StateWritten",
    "Uncertain",
    "UnsettledState",
    "WithRecord",
    "WriteClass",
]

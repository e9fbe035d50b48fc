"""Persistent agent state (spec §11, CAP-012): typed slots apart from conversation history, with
optimistic revisions and four write classes the caller must choose between — run-local,
committed with a canonical record, external and compensatable, external and uncertain."""

from ._backends import InMemoryStateBackend as InMemoryStateBackend
from ._backends import SqliteStateBackend as SqliteStateBackend
from ._backends import StateBackend as StateBackend
from ._layers import in_memory_state as in_memory_state
from ._layers import sqlite_state as sqlite_state
from ._model import MAX_KEY_CHARS as MAX_KEY_CHARS
from ._model import AgentState as AgentState
from ._model import AgentStateError as AgentStateError
from ._model import AgentStateService as AgentStateService
from ._model import Compensatable as Compensatable
from ._model import CorruptState as CorruptState
from ._model import RunLocal as RunLocal
from ._model import RunNotObserved as RunNotObserved
from ._model import StateConflict as StateConflict
from ._model import StateSlot as StateSlot
from ._model import StateStatus as StateStatus
from ._model import StateUnavailable as StateUnavailable
from ._model import StateValueInvalid as StateValueInvalid
from ._model import StateValueTooLarge as StateValueTooLarge
from ._model import StateView as StateView
from ._model import StateWritten as StateWritten
from ._model import Uncertain as Uncertain
from ._model import UnknownStateVersion as UnknownStateVersion
from ._model import UnsettledState as UnsettledState
from ._model import WithRecord as WithRecord
from ._model import WriteClass as WriteClass
from ._store import AgentStateStore as AgentStateStore

__all__ = [
    "AgentState",
    "AgentStateError",
    "AgentStateService",
    "AgentStateStore",
    "Compensatable",
    "CorruptState",
    "InMemoryStateBackend",
    "MAX_KEY_CHARS",
    "RunLocal",
    "RunNotObserved",
    "SqliteStateBackend",
    "StateBackend",
    "StateConflict",
    "StateSlot",
    "StateStatus",
    "StateUnavailable",
    "StateValueInvalid",
    "StateValueTooLarge",
    "StateView",
    "StateWritten",
    "Uncertain",
    "UnknownStateVersion",
    "UnsettledState",
    "WithRecord",
    "WriteClass",
    "in_memory_state",
    "sqlite_state",
]

"""Steering and follow-up (spec §4): input submitted to a running conversation, admitted through
one FIFO path with receipts, canonical before the next model request — in memory or persisted in
the SQLite database before the receipt is returned."""

from ._admission import Admissions as Admissions
from ._inbox import ConversationInbox as ConversationInbox
from ._journal import AdmissionJournal as AdmissionJournal
from ._journal import InMemoryJournal as InMemoryJournal
from ._journal import SqliteJournal as SqliteJournal
from ._layers import in_memory_steering as in_memory_steering
from ._layers import sqlite_steering as sqlite_steering
from ._model import InputKind as InputKind
from ._model import InputReceipt as InputReceipt
from ._model import InputState as InputState
from ._model import InputStatus as InputStatus
from ._model import Rejection as Rejection
from ._model import Steering as Steering
from ._model import SteeringLimits as SteeringLimits
from ._model import SteeringService as SteeringService

__all__ = [
    "AdmissionJournal",
    "Admissions",
    "ConversationInbox",
    "InMemoryJournal",
    "InputKind",
    "InputReceipt",
    "InputState",
    "InputStatus",
    "Rejection",
    "SqliteJournal",
    "Steering",
    "SteeringLimits",
    "SteeringService",
    "in_memory_steering",
    "sqlite_steering",
]

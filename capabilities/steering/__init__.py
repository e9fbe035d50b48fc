"""Steering and follow-up: input submitted to a running conversation, admitted through
one FIFO path with receipts, canonical before the next model request — in memory or persisted in
the SQLite database before the receipt is returned (``capabilities.sqlite_storage`` and
``in_memory_storage`` provide the :data:`SteeringService`, bounded by :class:`SteeringLimits`)."""

from ._model import InputReceipt as InputReceipt
from ._model import InputStatus as InputStatus
from ._model import Steering as Steering
from ._model import SteeringLimits as SteeringLimits
from ._model import SteeringService as SteeringService

__all__ = ["InputReceipt", "InputStatus", "Steering", "SteeringLimits", "SteeringService"]

"""The engine: runtime, turn loop, tool pipeline and scheduler, budgets, and the seams it consults."""

from ._allowance import AllowanceRefused as AllowanceRefused
from ._child import ChildRunRefused as ChildRunRefused
from ._child import ChildRunResult as ChildRunResult
from ._child import run_child as run_child
from ._log import InMemoryConversationLog as InMemoryConversationLog
from ._log import LogRetention as LogRetention
from ._logging import LOGGER_NAME as LOGGER_NAME
from ._media import MediaMissing as MediaMissing
from ._media import MediaNotKept as MediaNotKept
from ._media import MediaStore as MediaStore
from ._models import MissingModels as MissingModels
from ._output_stream import OutputStream as OutputStream
from ._output_stream import OutputUpdate as OutputUpdate
from ._resume import RunAlreadyEnded as RunAlreadyEnded
from ._resume import RunExists as RunExists
from ._resume import UnknownRun as UnknownRun
from ._resume import pending_approvals as pending_approvals
from ._run_errors import ConversationBusy as ConversationBusy
from ._run_errors import ConversationEvicted as ConversationEvicted
from ._run_errors import ConversationExists as ConversationExists
from ._run_errors import InstructionsLeakSecret as InstructionsLeakSecret
from ._run_errors import UnknownConversation as UnknownConversation
from ._runtime import RunFailedError as RunFailedError
from ._runtime import RunResult as RunResult
from ._runtime import Runtime as Runtime
from ._runtime import open_runtime as open_runtime
from ._runtime import reduce_events as reduce_events
from ._runtime import run_sync as run_sync
from ._seams import Approval as Approval
from ._seams import ApprovalError as ApprovalError
from ._seams import ApprovalService as ApprovalService
from ._seams import ApprovalSuspended as ApprovalSuspended
from ._seams import AuthorizationDecision as AuthorizationDecision
from ._seams import CompactionRequest as CompactionRequest
from ._seams import Compactor as Compactor
from ._seams import CompactorService as CompactorService
from ._seams import ConversationLog as ConversationLog
from ._seams import ConversationLogError as ConversationLogError
from ._seams import ConversationLogService as ConversationLogService
from ._seams import RedactorService as RedactorService
from ._seams import RunEnding as RunEnding
from ._seams import RunInfo as RunInfo
from ._seams import RunListener as RunListener
from ._seams import RunListenerService as RunListenerService
from ._seams import RunObserver as RunObserver
from ._seams import RunObserversService as RunObserversService
from ._seams import SteeringInbox as SteeringInbox
from ._seams import SteeringInboxService as SteeringInboxService
from ._seams import SteeringInput as SteeringInput
from ._seams import StepStoreService as StepStoreService
from ._seams import TokenCounter as TokenCounter
from ._seams import TokenCounterService as TokenCounterService
from ._seams import ToolAuthorization as ToolAuthorization
from ._seams import ToolAuthorizationService as ToolAuthorizationService
from ._seams import estimate_tokens as estimate_tokens
from ._seams import observe_runs as observe_runs
from ._steps import InMemoryStepStore as InMemoryStepStore
from ._stream import RunStream as RunStream

__all__ = [
    "AllowanceRefused",
    "Approval",
    "ApprovalError",
    "ApprovalService",
    "ApprovalSuspended",
    "AuthorizationDecision",
    "ChildRunRefused",
    "ChildRunResult",
    "CompactionRequest",
    "Compactor",
    "CompactorService",
    "ConversationLog",
    "ConversationLogError",
    "ConversationLogService",
    "InMemoryConversationLog",
    "MediaMissing",
    "MediaNotKept",
    "MediaStore",
    "InMemoryStepStore",
    "ConversationBusy",
    "ConversationEvicted",
    "ConversationExists",
    "LogRetention",
    "UnknownConversation",
    "UnknownRun",
    "InstructionsLeakSecret",
    "LOGGER_NAME",
    "MissingModels",
    "RedactorService",
    "RunAlreadyEnded",
    "RunEnding",
    "RunExists",
    "RunFailedError",
    "RunInfo",
    "RunListener",
    "RunListenerService",
    "RunObserver",
    "RunObserversService",
    "RunResult",
    "RunStream",
    "OutputStream",
    "OutputUpdate",
    "Runtime",
    "SteeringInbox",
    "SteeringInboxService",
    "SteeringInput",
    "StepStoreService",
    "TokenCounter",
    "TokenCounterService",
    "ToolAuthorization",
    "ToolAuthorizationService",
    "estimate_tokens",
    "observe_runs",
    "open_runtime",
    "pending_approvals",
    "reduce_events",
    "run_sync",
    "run_child",
]

"""Agent definitions, policy, events, canonical records, outcomes, bounds and redaction."""

from ._allowance import RunAllowance as RunAllowance
from ._approval import ApprovalDecision as ApprovalDecision
from ._approval import ApprovalRequest as ApprovalRequest
from ._approval import Risk as Risk
from ._authoring import MAX_INSTRUCTIONS_BYTES as MAX_INSTRUCTIONS_BYTES
from ._authoring import MAX_PREPARED_BYTES as MAX_PREPARED_BYTES
from ._authoring import MAX_PREPARED_ITEMS as MAX_PREPARED_ITEMS
from ._authoring import DefaultInput as DefaultInput
from ._authoring import InstructionsContext as InstructionsContext
from ._authoring import InstructionsFailed as InstructionsFailed
from ._authoring import PrepareContextFailed as PrepareContextFailed
from ._authoring import PreparedContext as PreparedContext
from ._authoring import TurnContext as TurnContext
from ._bounds import bounded_json as bounded_json
from ._bounds import bounded_parsed as bounded_parsed
from ._bounds import compact_json as compact_json
from ._checks import CheckContext as CheckContext
from ._checks import FinalAnswer as FinalAnswer
from ._checks import Guardrail as Guardrail
from ._checks import GuardrailFailed as GuardrailFailed
from ._checks import GuardrailResult as GuardrailResult
from ._checks import GuardrailTripped as GuardrailTripped
from ._checks import OutputValidatorFailed as OutputValidatorFailed
from ._checks import RejectOutput as RejectOutput
from ._errors import ApprovalDenied as ApprovalDenied
from ._errors import BudgetExhausted as BudgetExhausted
from ._errors import EngineDefect as EngineDefect
from ._errors import FinalTurnDeclaredTools as FinalTurnDeclaredTools
from ._errors import ModelFailed as ModelFailed
from ._errors import OutputInvalid as OutputInvalid
from ._errors import RepeatedToolFailure as RepeatedToolFailure
from ._errors import RunError as RunError
from ._errors import StorageFailed as StorageFailed
from ._errors import ToolFailedRun as ToolFailedRun
from ._errors import ToolSourceFailed as ToolSourceFailed
from ._events import *  # noqa: F403
from ._events import __all__ as _events_all
from ._one_of import FINAL_RESULT as FINAL_RESULT
from ._one_of import OneOf as OneOf
from ._one_of import final_result_names as final_result_names
from ._one_of import one_of as one_of
from ._outcomes import ToolDefect as ToolDefect
from ._outcomes import ToolFailure as ToolFailure
from ._outcomes import ToolInvalidInput as ToolInvalidInput
from ._outcomes import ToolOutcome as ToolOutcome
from ._outcomes import ToolRejected as ToolRejected
from ._outcomes import ToolSuccess as ToolSuccess
from ._outcomes import ToolUnknownOutcome as ToolUnknownOutcome
from ._policy import Agent as Agent
from ._policy import AgentPolicy as AgentPolicy
from ._policy import ChildBudget as ChildBudget
from ._policy import CompactionPolicy as CompactionPolicy
from ._policy import ResponseLimits as ResponseLimits
from ._policy import RetryPolicy as RetryPolicy
from ._policy import ToolResultBounds as ToolResultBounds
from ._policy import check_model_choice as check_model_choice
from ._records import *  # noqa: F403
from ._records import __all__ as _records_all
from ._redact import REDACTED as REDACTED
from ._redact import Redactor as Redactor
from ._redact import SecretRedactor as SecretRedactor
from ._redact import StreamRedactor as StreamRedactor
from ._redact import redact_arguments as redact_arguments
from ._redact import redact_json_text as redact_json_text
from ._usage import UsageDelta as UsageDelta
from ._usage import UsageTotals as UsageTotals

__all__ = [
    "Agent",
    "AgentPolicy",
    "ChildBudget",
    "ApprovalDenied",
    "ApprovalDecision",
    "ApprovalRequest",
    "BudgetExhausted",
    "CheckContext",
    "CompactionPolicy",
    "DefaultInput",
    "EngineDefect",
    "FINAL_RESULT",
    "FinalAnswer",
    "FinalTurnDeclaredTools",
    "Guardrail",
    "GuardrailFailed",
    "GuardrailResult",
    "GuardrailTripped",
    "MAX_INSTRUCTIONS_BYTES",
    "MAX_PREPARED_BYTES",
    "MAX_PREPARED_ITEMS",
    "InstructionsContext",
    "InstructionsFailed",
    "ModelFailed",
    "OneOf",
    "OutputInvalid",
    "OutputValidatorFailed",
    "PrepareContextFailed",
    "PreparedContext",
    "REDACTED",
    "RejectOutput",
    "Redactor",
    "RepeatedToolFailure",
    "ResponseLimits",
    "RetryPolicy",
    "Risk",
    "RunAllowance",
    "RunError",
    "SecretRedactor",
    "StorageFailed",
    "StreamRedactor",
    "ToolDefect",
    "ToolFailedRun",
    "ToolFailure",
    "ToolInvalidInput",
    "ToolOutcome",
    "ToolRejected",
    "ToolResultBounds",
    "ToolSourceFailed",
    "ToolSuccess",
    "ToolUnknownOutcome",
    "TurnContext",
    "UsageDelta",
    "UsageTotals",
    "bounded_json",
    "bounded_parsed",
    "check_model_choice",
    "one_of",
    "compact_json",
    "final_result_names",
    "redact_arguments",
    "redact_json_text",
    *_events_all,
    *_records_all,
]

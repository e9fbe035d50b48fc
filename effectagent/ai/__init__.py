"""The AI layer: Tool (and ``@tool``), Toolkit, LanguageModel, prompts, response parts, usage, AI
errors.

Besides what a program names (tools, toolkits, ``ModelRequest`` and the messages of a prompt, the
errors a model call can end with), this is the vocabulary the engine, the providers and the
testing kit share — response parts, the response reducer, the tool broker — which they may only
import from here."""

from ._cache import MAX_CACHE_MARKS as MAX_CACHE_MARKS
from ._cache import PromptCaching as PromptCaching
from ._call_ids import fresh_call_ids as fresh_call_ids
from ._context import InnerResult as InnerResult
from ._context import OutcomeUnknown as OutcomeUnknown
from ._context import ToolBroker as ToolBroker
from ._context import ToolCallContext as ToolCallContext
from ._cost import MICROS_PER_DOLLAR as MICROS_PER_DOLLAR
from ._cost import NoPriceForModel as NoPriceForModel
from ._cost import Price as Price
from ._cost import PricesService as PricesService
from ._cost import PriceTable as PriceTable
from ._cost import dollars as dollars
from ._cost import model_name_of as model_name_of
from ._durable import Reconciled as Reconciled
from ._durable import StepKey as StepKey
from ._durable import StepResult as StepResult
from ._durable import StepStore as StepStore
from ._errors import AiError as AiError
from ._errors import AuthenticationFailed as AuthenticationFailed
from ._errors import ContentFiltered as ContentFiltered
from ._errors import ContextLengthExceeded as ContextLengthExceeded
from ._errors import InvalidModelRequest as InvalidModelRequest
from ._errors import MalformedResponse as MalformedResponse
from ._errors import ModelNetworkError as ModelNetworkError
from ._errors import ModelUnavailable as ModelUnavailable
from ._errors import ProviderError as ProviderError
from ._errors import RateLimited as RateLimited
from ._errors import ResponseTooLarge as ResponseTooLarge
from ._errors import format_bytes as format_bytes
from ._fallback import FallbackChain as FallbackChain
from ._fallback import FallbackModel as FallbackModel
from ._fallback import falls_back as falls_back
from ._function_tool import tool as tool
from ._media import DEFAULT_MAX_MEDIA_BYTES as DEFAULT_MAX_MEDIA_BYTES
from ._media import MEDIA_TYPES as MEDIA_TYPES
from ._media import AudioPart as AudioPart
from ._media import DocumentPart as DocumentPart
from ._media import ImagePart as ImagePart
from ._media import MediaError as MediaError
from ._media import MediaKind as MediaKind
from ._media import MediaNotSupported as MediaNotSupported
from ._media import MediaPart as MediaPart
from ._media import MediaRef as MediaRef
from ._media import describe_media as describe_media
from ._media import media_as_text as media_as_text
from ._media import media_from_bytes as media_from_bytes
from ._media import media_from_path as media_from_path
from ._media import sniff_media_type as sniff_media_type
from ._media import split_media as split_media
from ._model import LanguageModel as LanguageModel
from ._model import LanguageModelService as LanguageModelService
from ._model import ModelRequest as ModelRequest
from ._model import OutputFormat as OutputFormat
from ._model import close_stream as close_stream
from ._model import generate as generate
from ._model_choice import ModelChoice as ModelChoice
from ._model_choice import ModelKey as ModelKey
from ._model_choice import RoutingModel as RoutingModel
from ._prices import DEFAULT_PRICES as DEFAULT_PRICES
from ._prices import PRICES_TAKEN as PRICES_TAKEN
from ._prompt import AssistantMessage as AssistantMessage
from ._prompt import Message as Message
from ._prompt import NativeReasoningContent as NativeReasoningContent
from ._prompt import ReasoningContent as ReasoningContent
from ._prompt import SystemMessage as SystemMessage
from ._prompt import TextContent as TextContent
from ._prompt import ToolCallContent as ToolCallContent
from ._prompt import ToolMessage as ToolMessage
from ._prompt import ToolResultContent as ToolResultContent
from ._prompt import UserMessage as UserMessage
from ._reduce import DEFAULT_MAX_NATIVE_BLOCK_BYTES as DEFAULT_MAX_NATIVE_BLOCK_BYTES
from ._reduce import DEFAULT_MAX_NATIVE_BYTES as DEFAULT_MAX_NATIVE_BYTES
from ._reduce import DEFAULT_MAX_RESPONSE_BYTES as DEFAULT_MAX_RESPONSE_BYTES
from ._reduce import DEFAULT_MAX_TOOL_ARGUMENT_BYTES as DEFAULT_MAX_TOOL_ARGUMENT_BYTES
from ._reduce import ModelResponse as ModelResponse
from ._reduce import ResponseReducer as ResponseReducer
from ._reduce import TruncatedToolCall as TruncatedToolCall
from ._response import FinishPart as FinishPart
from ._response import FinishReason as FinishReason
from ._response import NativeReasoningPart as NativeReasoningPart
from ._response import ReasoningDeltaPart as ReasoningDeltaPart
from ._response import ReasoningEndPart as ReasoningEndPart
from ._response import ReasoningStartPart as ReasoningStartPart
from ._response import ResponseMetadataPart as ResponseMetadataPart
from ._response import ResponsePart as ResponsePart
from ._response import TextDeltaPart as TextDeltaPart
from ._response import TextEndPart as TextEndPart
from ._response import TextStartPart as TextStartPart
from ._response import ToolCallPart as ToolCallPart
from ._response import ToolParamsDeltaPart as ToolParamsDeltaPart
from ._response import ToolParamsEndPart as ToolParamsEndPart
from ._response import ToolParamsStartPart as ToolParamsStartPart
from ._tool import DEFAULT_ARGUMENT_LIMITS as DEFAULT_ARGUMENT_LIMITS
from ._tool import Binding as Binding
from ._tool import FailureMode as FailureMode
from ._tool import Handler as Handler
from ._tool import OutputSchemaViolation as OutputSchemaViolation
from ._tool import Reconcile as Reconcile
from ._tool import ReconcilingHandler as ReconcilingHandler
from ._tool import Tool as Tool
from ._tool import ToolAnnotations as ToolAnnotations
from ._tool import encode_failure as encode_failure
from ._tool import handler_result as handler_result
from ._tool_source import ToolSnapshot as ToolSnapshot
from ._tool_source import ToolSource as ToolSource
from ._toolkit import ToolDescriptor as ToolDescriptor
from ._toolkit import Toolkit as Toolkit
from ._usage import InputTokens as InputTokens
from ._usage import Usage as Usage

__all__ = [
    "AiError",
    "AudioPart",
    "DEFAULT_MAX_MEDIA_BYTES",
    "DocumentPart",
    "ImagePart",
    "MEDIA_TYPES",
    "MediaError",
    "MediaKind",
    "MediaNotSupported",
    "MediaPart",
    "MediaRef",
    "describe_media",
    "media_as_text",
    "media_from_bytes",
    "media_from_path",
    "sniff_media_type",
    "split_media",
    "DEFAULT_PRICES",
    "MAX_CACHE_MARKS",
    "MICROS_PER_DOLLAR",
    "NoPriceForModel",
    "PRICES_TAKEN",
    "Price",
    "PriceTable",
    "PricesService",
    "PromptCaching",
    "dollars",
    "fresh_call_ids",
    "model_name_of",
    "DEFAULT_ARGUMENT_LIMITS",
    "DEFAULT_MAX_NATIVE_BLOCK_BYTES",
    "DEFAULT_MAX_NATIVE_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_TOOL_ARGUMENT_BYTES",
    "AssistantMessage",
    "AuthenticationFailed",
    "Binding",
    "ContentFiltered",
    "ContextLengthExceeded",
    "FailureMode",
    "FallbackChain",
    "FallbackModel",
    "FinishPart",
    "FinishReason",
    "Handler",
    "InputTokens",
    "InvalidModelRequest",
    "LanguageModel",
    "LanguageModelService",
    "MalformedResponse",
    "Message",
    "ModelChoice",
    "ModelKey",
    "ModelNetworkError",
    "ModelRequest",
    "OutputFormat",
    "ModelResponse",
    "ModelUnavailable",
    "NativeReasoningContent",
    "NativeReasoningPart",
    "OutputSchemaViolation",
    "ProviderError",
    "RateLimited",
    "Reconcile",
    "RoutingModel",
    "Reconciled",
    "ReconcilingHandler",
    "ResponseTooLarge",
    "ReasoningContent",
    "ReasoningDeltaPart",
    "ReasoningEndPart",
    "ReasoningStartPart",
    "ResponseMetadataPart",
    "ResponsePart",
    "ResponseReducer",
    "StepKey",
    "StepResult",
    "StepStore",
    "SystemMessage",
    "TextContent",
    "TextDeltaPart",
    "TextEndPart",
    "TextStartPart",
    "Tool",
    "ToolAnnotations",
    "ToolCallPart",
    "ToolCallContent",
    "InnerResult",
    "OutcomeUnknown",
    "ToolBroker",
    "ToolSnapshot",
    "ToolSource",
    "ToolCallContext",
    "ToolDescriptor",
    "ToolMessage",
    "ToolParamsDeltaPart",
    "ToolParamsEndPart",
    "ToolParamsStartPart",
    "ToolResultContent",
    "Toolkit",
    "TruncatedToolCall",
    "Usage",
    "UserMessage",
    "encode_failure",
    "close_stream",
    "falls_back",
    "format_bytes",
    "generate",
    "handler_result",
    "tool",
]

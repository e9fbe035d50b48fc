"""Language model providers: adapters on the official ``openai`` and ``anthropic`` SDKs.

Choose a model by a string and get a Layer providing the ``LanguageModelService``::

    layer = model_layer("anthropic:claude-sonnet-4-5") + toolkit.handlers({...})
    layer = model_layer("openai:gpt-4.1")                    # OpenAI, Responses API
    layer = model_layer("openai-chat:gpt-4.1")               # OpenAI, Chat Completions
    layer = model_layer("openai-compatible:qwen3", base_url="http://127.0.0.1:8000/v1")

or build the settings explicitly (:class:`OpenAIResponses`, :class:`OpenAIChat`,
:class:`OpenAICompatible`, :class:`Anthropic`) and call ``.layer()`` — or ``.open()`` for an
``async with`` block without a runtime.

Importing this package imports neither SDK: each is imported when a model's layer is built (the
SDKs take 0.5 s and 1.2 s to import). The SDKs' own retries are off — the engine retries on its
own clock — and their types never leave an adapter: failures are typed
:class:`~effectagent.ai.AiError`\\ s (see :mod:`~effectagent.providers.errors`), streams are
:mod:`effectagent.ai` response parts.

Modules, one concept each: :mod:`~.model_string` (the strings), :mod:`~.openai_models` and
:mod:`~.anthropic_model` (settings, layers, adapters), :mod:`~.openai_chat`,
:mod:`~.openai_responses` and :mod:`~.anthropic_messages` (each provider's pure request and
stream mapping), :mod:`~.streaming` (the shared streaming loop), :mod:`~.sse` (event-stream
decoding), :mod:`~.errors` (typed errors), :mod:`~.output_schema` (what each provider can
enforce), :mod:`~.reasoning` (replaying provider-native reasoning), :mod:`~.credentials` (keys).
"""

from .anthropic_messages import MessagesDecoder as MessagesDecoder
from .anthropic_model import Anthropic as Anthropic
from .anthropic_model import AnthropicModel as AnthropicModel
from .errors import error_from_payload as error_from_payload
from .errors import error_from_status as error_from_status
from .model_string import PROVIDERS as PROVIDERS
from .model_string import ModelSettings as ModelSettings
from .model_string import model_layer as model_layer
from .model_string import model_settings as model_settings
from .model_string import open_model as open_model
from .openai_chat import ChatCompletionsDecoder as ChatCompletionsDecoder
from .openai_models import OpenAIChat as OpenAIChat
from .openai_models import OpenAIChatModel as OpenAIChatModel
from .openai_models import OpenAICompatible as OpenAICompatible
from .openai_models import OpenAIResponses as OpenAIResponses
from .openai_models import OpenAIResponsesModel as OpenAIResponsesModel
from .openai_responses import ResponsesDecoder as ResponsesDecoder
from .output_schema import anthropic_output_schema as anthropic_output_schema
from .output_schema import openai_strict_problems as openai_strict_problems
from .reasoning import ReasoningMemory as ReasoningMemory
from .sse import SSEDecoder as SSEDecoder

__all__ = [
    # choosing a model
    "model_layer",
    "model_settings",
    "open_model",
    "PROVIDERS",
    "ModelSettings",
    # settings (explicit construction) and the adapters they open
    "OpenAIResponses",
    "OpenAIChat",
    "OpenAICompatible",
    "Anthropic",
    "OpenAIResponsesModel",
    "OpenAIChatModel",
    "AnthropicModel",
    # the pure mappings, for tests and tools
    "ChatCompletionsDecoder",
    "ResponsesDecoder",
    "MessagesDecoder",
    "SSEDecoder",
    "error_from_status",
    "error_from_payload",
    "openai_strict_problems",
    "anthropic_output_schema",
    "ReasoningMemory",
]

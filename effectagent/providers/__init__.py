"""Language model providers: adapters on the official ``openai``, ``anthropic`` and
``google-genai`` SDKs.

Choose a model by a string and get a Layer providing the ``LanguageModelService``::

    layer = model_layer("anthropic:claude-sonnet-4-5") + toolkit.handlers(...)
    layer = model_layer("openai:gpt-4.1")                    # OpenAI, Responses API
    layer = model_layer("openai-chat:gpt-4.1")               # OpenAI, Chat Completions
    layer = model_layer("openai-compatible:qwen3", base_url="http://127.0.0.1:8000/v1")
    layer = model_layer("google:gemini-2.5-flash")           # Gemini API

or build the settings explicitly (:class:`OpenAIResponses`, :class:`OpenAIChat`,
:class:`OpenAICompatible`, :class:`Anthropic`, :class:`Gemini`) and call ``.layer()`` — or
``.open()`` for an ``async with`` block without a runtime.

Importing this package imports no SDK: each is imported when a model's layer is built (the SDKs
take from half a second to over a second to import). The SDKs' own retries are off — the engine
retries on its own clock — and their types never leave an adapter: failures are typed
:class:`~effectagent.ai.AiError`\\ s, streams are :mod:`effectagent.ai` response parts.

Everything else is private, one concept a module: ``_model_string`` (the strings),
``_openai_models``, ``_anthropic_model`` and ``_gemini_model`` (settings, layers, adapters),
``_openai_chat``, ``_openai_responses``, ``_anthropic_messages`` and ``_gemini_content`` (each
provider's pure request and stream mapping), ``_streaming`` (the shared streaming loop),
``_sse`` (event-stream decoding), ``_errors`` (typed errors), ``_output_schema`` (what each
provider can enforce), ``_credentials`` (keys), ``_media`` (which model takes which media, and
the check made before a request is sent). Provider-native reasoning (signed thinking,
encrypted reasoning items, thought signatures) is not kept here: each adapter streams it as
``NativeReasoningPart`` parts, the engine records it, and each adapter sends back, from the prompt,
only what its own provider family made.
"""

from ._anthropic_model import Anthropic as Anthropic
from ._gemini_model import Gemini as Gemini
from ._media import MediaSupport as MediaSupport
from ._media import media_support as media_support
from ._model_string import ModelSettings as ModelSettings
from ._model_string import model_layer as model_layer
from ._model_string import model_settings as model_settings
from ._model_string import open_model as open_model
from ._openai_models import OpenAIChat as OpenAIChat
from ._openai_models import OpenAICompatible as OpenAICompatible
from ._openai_models import OpenAIResponses as OpenAIResponses

__all__ = [
    # choosing a model
    "model_layer",
    "model_settings",
    "open_model",
    "ModelSettings",
    # settings (explicit construction)
    "OpenAIResponses",
    "OpenAIChat",
    "OpenAICompatible",
    "Anthropic",
    "Gemini",
    # which images, documents and audio a model takes
    "MediaSupport",
    "media_support",
]

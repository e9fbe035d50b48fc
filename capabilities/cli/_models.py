"""The command's model: which one a model string names (checked before anything is opened), and
the chat's :class:`ModelSwitch`, through which ``/model NAME`` changes the model of the next run.

:func:`choose_model` turns a model string and its options (a base URL, the variable holding the
key) into a :class:`ModelChoice`, or refuses it with a :class:`ModelRefused` that says why in a
sentence — an unknown provider, an ``openai-compatible`` model without a base URL, a key
variable that is not set, or set to a value too short to be a key. Only the key of the model's
own provider is checked: another provider's variable is none of its business. It imports no
provider SDK.

:class:`ModelSwitch` is the ``LanguageModelService`` of a chat: each model call goes to the model
chosen last, opened in the background when it is chosen (its SDK imported, its client made) —
so the chat takes input while it opens, and a call waits for it. A model that cannot be opened
is said once (``on_refused``) and the one before it stays.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from effectagent.ai import (
    AiError,
    LanguageModel,
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ResponsePart,
    generate,
)
from effectagent.effect import Layer
from effectagent.providers import MediaSupport, model_settings

from ._errors import missing_package, sentence

__all__ = [
    "KEY_VARIABLES",
    "MIN_KEY_CHARS",
    "ModelChoice",
    "ModelRefused",
    "ModelSwitch",
    "choose_model",
]

#: The variables each provider reads its key from when none is named, in the order it reads them.
KEY_VARIABLES: Final[Mapping[str, tuple[str, ...]]] = {
    "openai": ("OPENAI_API_KEY",),
    "openai-responses": ("OPENAI_API_KEY",),
    "openai-chat": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
    "gemini": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
}


#: The shortest value taken as an API key: what is shorter is a placeholder typed by mistake —
#: and could not be kept out of what is shown (``SecretRedactor`` refuses shorter secrets).
MIN_KEY_CHARS: Final = 4


class ModelRefused(Exception):
    """A model string that cannot be used, said in a sentence; ``unavailable`` when it is well
    formed but what it needs is missing (exit status 3 rather than 2); ``malformed`` when the
    string (or an option) is what is wrong."""

    def __init__(self, message: str, *, unavailable: bool = False, malformed: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable
        self.malformed = malformed


def _too_short(variable: str) -> ModelRefused:
    """The refusal of a key variable set to a value too short to be a key (never quoted)."""
    return ModelRefused(
        f"the environment variable {variable} is set to something too short to be an API key "
        f"(under {MIN_KEY_CHARS} characters): set it to the provider's key"
    )


@attrs.frozen
class ModelChoice:
    """A model string that names a usable model, the options its settings take, and the secrets
    it brings (its key's value) — to be kept out of everything shown."""

    spec: str
    options: Mapping[str, Any]
    secrets: tuple[str, ...] = ()

    @property
    def provider(self) -> str:
        """The provider prefix, in lower case."""
        return provider_of(self.spec)

    def settings(self) -> Any:
        """The provider's settings for this model (nothing opened)."""
        return model_settings(self.spec, **self.options)


def provider_of(spec: str) -> str:
    """The provider prefix of a model string, in lower case."""
    return spec.partition(":")[0].strip().lower()


def media_option(text: str) -> MediaSupport:
    """``--media KINDS`` as the models' ``media`` setting; :class:`ModelRefused` for a kind no
    model takes."""
    kinds = {kind.strip().lower() for kind in text.split(",") if kind.strip()}
    if kinds == {"none"}:
        return MediaSupport()
    unknown = sorted(kinds - {"image", "document", "audio"})
    if unknown or not kinds:
        raise ModelRefused(
            f"--media takes image, document and audio (comma-separated) or none, got {text!r}"
        )
    return MediaSupport(frozenset(kinds))


def choose_model(
    spec: str,
    *,
    base_url: str | None,
    api_key_env: str | None,
    environ: Mapping[str, str],
    media: str | None = None,
) -> ModelChoice:
    """The model ``spec`` names with ``base_url`` and the key in ``api_key_env`` (default: the
    provider's usual variable), checked: raises :class:`ModelRefused`. ``media``: the kinds of
    media the model takes (``"image,document"``, ``"none"``), None for the providers' table."""
    spec = spec.strip()
    provider = provider_of(spec)
    options: dict[str, Any] = {}
    if media is not None:
        options["media"] = media_option(media)
    if base_url:
        options["base_url"] = base_url
    key_variable = api_key_env
    default_variables: tuple[str, ...] = ()
    if provider == "openai-compatible":
        if key_variable:
            options["api_key_env"] = key_variable
    elif key_variable:
        key = environ.get(key_variable)
        if not key:
            raise ModelRefused(
                f"no API key: the environment variable {key_variable} is not set", unavailable=True
            )
        if len(key) < MIN_KEY_CHARS:
            raise _too_short(key_variable)
        options["api_key"] = key
    else:
        default_variables = KEY_VARIABLES.get(provider, ())
    if provider == "openai-compatible" and not base_url:
        raise ModelRefused(
            f"{spec!r} needs --base-url URL (the server's OpenAI-compatible root, e.g. "
            "http://127.0.0.1:8000/v1), or base_url in the config's [model] table"
        )
    try:
        model_settings(spec, **options)  # checks the string and the options now
    except (ValueError, TypeError) as exc:
        raise ModelRefused(str(exc), malformed=True) from None
    variables = (key_variable,) if key_variable else default_variables
    present = [name for name in variables if environ.get(name)]
    if present and len(environ[present[0]]) < MIN_KEY_CHARS:
        raise _too_short(present[0])  # the variable the provider reads: its key
    # Any other variable set is kept out of what is shown too — if it can be (is long enough).
    secrets = tuple(
        dict.fromkeys(environ[name] for name in present if len(environ[name]) >= MIN_KEY_CHARS)
    )
    return ModelChoice(spec, options, secrets)


def every_key(environ: Mapping[str, str], *named: str | None) -> tuple[str, ...]:
    """The values of every provider's key variable set in ``environ`` (and of the variables
    ``named``): the secrets a chat that may switch models keeps out of what it shows. A value
    too short to be a key is left out (it could not be kept out: a chat whose ``/model`` turns
    to its provider is refused by :func:`choose_model`, naming the variable)."""
    variables = {*(v for names in KEY_VARIABLES.values() for v in names), *filter(None, named)}
    values = (environ.get(name, "") for name in variables)
    return tuple(sorted({value for value in values if len(value) >= MIN_KEY_CHARS}))


class _Opening:
    """One chosen model: opened in the background, held open until the switch closes."""

    def __init__(self, choice: ModelChoice) -> None:
        self.choice = choice
        self.model: LanguageModel | None = None
        self.error: BaseException | None = None
        self.done = trio.Event()

    async def hold(self, closing: trio.Event) -> None:
        """Open the model and keep it open until ``closing``. Cancellation: closes it."""
        try:
            async with self.choice.settings().open() as model:
                self.model = model
                self.done.set()
                await closing.wait()
        except Exception as exc:  # said by the switch, as a sentence
            self.error = exc
        finally:
            self.done.set()

    def failure(self) -> AiError:
        """Why the model cannot be used, as the error its calls fail with."""
        error = self.error
        if isinstance(error, AiError):
            return error
        missing = missing_package(error) if error is not None else None
        why = missing or sentence(error)
        return ProviderError(f"the model {self.choice.spec} cannot be opened: {why}")


class ModelSwitch:
    """The model of each call: the one chosen last (module notes). Open it (``async with
    switch.open()``: the models it opens stay open for the block) around the runtime it is
    given to through :meth:`layer`; :meth:`choose` changes the model for the calls that start
    from then on."""

    def __init__(
        self,
        first: ModelChoice,
        *,
        on_refused: Callable[[ModelChoice, AiError], None] | None = None,
    ) -> None:
        self._current = _Opening(first)
        self._opened: list[_Opening] = []
        self._nursery: trio.Nursery | None = None
        self._closing = trio.Event()
        self.on_refused = on_refused

    @property
    def current(self) -> ModelChoice:
        """The model the next call goes to."""
        return self._current.choice

    def layer(self) -> Layer:
        """This switch as the ``LanguageModelService`` (open it around the runtime)."""
        return Layer.succeed(LanguageModelService, self, name="model switch")

    @asynccontextmanager
    async def open(self) -> AsyncIterator[ModelSwitch]:
        """Open the first model in the background; close every model opened when the block
        ends.

        Cancellation: the models being opened are abandoned; those open are closed (shielded)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._start(self._current)
            try:
                yield self
            finally:
                self._closing.set()  # each model held open closes (shielded, in its task)
                self._nursery = None

    def _start(self, opening: _Opening, previous: _Opening | None = None) -> None:
        assert self._nursery is not None, "the switch is not open"
        self._opened.append(opening)
        self._nursery.start_soon(self._watch, opening, previous)

    async def _watch(self, opening: _Opening, previous: _Opening | None) -> None:
        await opening.hold(self._closing)  # returns at once when it cannot be opened
        if opening.error is None:
            return
        if previous is not None and self._current is opening:
            self._current = previous  # the model before it is used again
        if self.on_refused is not None:
            self.on_refused(opening.choice, opening.failure())

    def choose(self, choice: ModelChoice) -> None:
        """The calls that start from now on go to ``choice``, opened now in the background; if
        it cannot be opened, the model before it is used again (and ``on_refused`` says why)."""
        previous = self._current
        opening = _Opening(choice)
        self._current = opening
        self._start(opening, previous)

    async def ready(self) -> ModelChoice:
        """Wait until the current model is open; raise the error that kept it from opening.

        Cancellation: only waits."""
        opening = self._current
        await opening.done.wait()
        if opening.model is None:
            raise opening.failure()
        return opening.choice

    async def _model(self) -> LanguageModel:
        opening = self._current
        await opening.done.wait()
        if opening.model is None:
            raise opening.failure()
        return opening.model

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """The current model's stream (once it is open).

        Cancellation: as the model's own stream; the wait for it to open is a checkpoint."""
        model = await self._model()
        parts = model.stream(request)
        try:
            async for part in parts:
                yield part
        finally:
            aclose = getattr(parts, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response (reduced from :meth:`stream`). Cancellation: as :meth:`stream`."""
        return await generate(self, request)

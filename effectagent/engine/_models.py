"""Which model each part of a run asks, and preflight of every model an agent can reach.

An agent names up to three models (``Agent.model``, ``grace_model``, ``summary_model``), each a
model string, a :class:`~effectagent.ai.ModelKey` or None; a run may name its own
(``runtime.run(..., model=...)``). They resolve, for one run, as:

* the turns: the run's model, else the agent's ``model``, else the runtime's
  ``LanguageModelService``;
* the grace turn: the agent's ``grace_model``, else the turns' model;
* compaction's summary call: the agent's ``summary_model``, else the turns' model.

Every model is a service: a ``ModelKey`` is its ``service`` key, which the application's Layer
provides; a model string has a key of its own (:func:`string_key`, one per string), which the
runtime provides by opening the string's model through ``effectagent.providers`` when it opens —
for the agents given to ``open_runtime`` and the strings of its ``models=``. So preflight is the
usual one: a model nobody provides is named before anything runs, in a sentence
(:class:`MissingModels`), for the agent, its subagents and each role.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, final

from effectagent.ai import LanguageModel, LanguageModelService, ModelChoice, ModelKey
from effectagent.core import Agent, check_model_choice
from effectagent.effect import (
    Context,
    Layer,
    MissingRequirement,
    MissingServicesError,
    ServiceKey,
)

__all__ = [
    "MissingModels",
    "ResolvedModels",
    "choice_name",
    "missing_models",
    "model_key",
    "model_requirements",
    "model_strings_layer",
    "resolve_models",
    "string_key",
    "strings_reached",
    "with_model_strings",
]

#: The key of each model string the runtime opens (one key per string, for the process).
_STRING_KEYS: dict[str, ServiceKey[LanguageModel]] = {}


def string_key(model: str) -> ServiceKey[LanguageModel]:
    """The service key of a model string (the same key for the same string)."""
    key = _STRING_KEYS.get(model)
    if key is None:
        key = _STRING_KEYS[model] = ServiceKey(f"model {model}", f"the model {model!r}")
    return key


def model_key(choice: ModelChoice | None) -> ServiceKey[LanguageModel]:
    """The service key a choice names: the runtime's model for None."""
    if choice is None:
        return LanguageModelService
    if isinstance(choice, ModelKey):
        return choice.service
    return string_key(choice)


def choice_name(choice: ModelChoice | None) -> str | None:
    """What records call a model: its string, its ``ModelKey``'s name, or None for the runtime's
    own model — whatever that model calls itself: a recorded run and its replay (a cassette's
    model in its place) then write the same records."""
    if isinstance(choice, ModelKey):
        return choice.name
    return choice


def _uses(
    agent: Agent, override: ModelChoice | None
) -> Iterator[tuple[ModelChoice | None, str, str]]:
    """Each model ``agent``'s runs may ask (with ``override`` as the run's), with a sentence's
    verb and a label for it."""
    yield (override if override is not None else agent.model), "runs on", ""
    if agent.grace_model is not None:
        yield agent.grace_model, "runs its grace turn on", "its grace turn's model"
    if agent.summary_model is not None:
        yield agent.summary_model, "summarizes for compaction with", "its summary model"


def _children(agent: Agent) -> Iterator[tuple[Agent, str]]:
    for tool in agent.toolkit:
        for child in getattr(tool.handler, "child_agents", ()):
            if isinstance(child, Agent) and child is not agent:
                yield child, tool.name


def _reached(
    agent: Agent, override: ModelChoice | None, via: str, seen: set[int]
) -> Iterator[tuple[ModelChoice | None, str]]:
    """Every model ``agent`` can reach, its subagents' included, with a sentence's subject and
    verb: ``"agent 'x' runs on"``."""
    if id(agent) in seen:
        return
    seen.add(id(agent))
    for choice, verb, _ in _uses(agent, override):
        yield choice, f"agent {agent.name!r}{via} {verb}"
    for child, tool in _children(agent):
        yield from _reached(child, None, f" (run by tool {tool!r} of agent {agent.name!r})", seen)


def model_requirements(agent: Agent, who: str) -> dict[ServiceKey[Any], str]:
    """The models ``agent`` itself needs, as service keys with who needs them (for
    ``requirements_of``; the subagents' are added there)."""
    needs: dict[ServiceKey[Any], str] = {}
    for choice, _, label in _uses(agent, None):
        needs.setdefault(model_key(choice), f"{who} ({label})" if label else who)
    return needs


def strings_reached(agents: Iterable[Agent]) -> list[str]:
    """The model strings the agents (and their subagents) name, in first-seen order."""
    found: dict[str, None] = {}
    seen: set[int] = set()
    for agent in agents:
        for choice, _ in _reached(agent, None, "", seen):
            if isinstance(choice, str):
                found.setdefault(choice, None)
    return list(found)


def model_strings_layer(strings: Iterable[str]) -> Layer | None:
    """A Layer opening each model string's model (``effectagent.providers``) under its
    :func:`string_key`, or None for no strings. A string no provider has is a ``ValueError``
    here, before anything is built; a missing API key fails as the layer is built, naming its
    environment variable."""
    unique = list(dict.fromkeys(strings))
    if not unique:
        return None
    from effectagent.providers import model_settings  # the providers only when a string is used

    layers = [
        Layer.scoped(string_key(string), partial(_open, model_settings(string)), name=string)
        for string in unique
    ]
    merged = layers[0]
    for layer in layers[1:]:
        merged = merged + layer
    return merged


def _open(settings: Any, _: Context) -> AbstractAsyncContextManager[LanguageModel]:
    opened: AbstractAsyncContextManager[LanguageModel] = settings.open()
    return opened


def with_model_strings(
    layer: Layer, agents: Sequence[Agent], models: Iterable[str]
) -> tuple[Layer, list[tuple[MissingRequirement, ModelChoice]]]:
    """``layer`` and the models of the model strings ``agents`` reach and of ``models``
    (:func:`model_strings_layer`), and the ``ModelKey`` s an agent reaches that neither provides
    (for :class:`MissingModels`, with what else preflight finds missing). (``open_runtime``'s
    part.)"""
    if isinstance(models, str | bytes):
        raise TypeError(
            "open_runtime(models=...) takes a sequence of model strings, not one string"
        )
    strings = list(models)
    for string in strings:
        check_model_choice(string, "open_runtime(models=...)")
    opened = model_strings_layer([*strings_reached(agents), *strings])
    if opened is not None:
        layer = layer + opened
    unreached: dict[ServiceKey[Any], tuple[MissingRequirement, ModelChoice]] = {}
    for agent in agents:
        for key, pair in _missing(agent, layer.provides, None).items():
            unreached.setdefault(key, pair)
    return layer, list(unreached.values())


class MissingModels(MissingServicesError):
    """Models an agent can reach that nobody provides, each named in a sentence — and
    ``others``, the other services preflight found missing at the same time, listed after them
    (``missing`` holds them all)."""

    def __init__(
        self,
        missing: Iterable[tuple[MissingRequirement, ModelChoice]],
        others: Iterable[MissingRequirement] = (),
    ) -> None:
        pairs = list(missing)
        rest = tuple(others)
        super().__init__([*(requirement for requirement, _ in pairs), *rest])
        #: The models (requirement and choice) nobody provides.
        self.unreached = tuple(pairs)
        text = " ".join(_sentence(requirement, choice) for requirement, choice in pairs)
        if rest:
            lines = [f"  - {m.key.name!r}, required by {m.required_by}" for m in rest]
            text += f"\nAlso {len(rest)} required service(s) not provided:\n" + "\n".join(lines)
        self.args = (text,)


def _sentence(requirement: MissingRequirement, choice: ModelChoice) -> str:
    who = requirement.required_by
    subject = who[:1].upper() + who[1:]
    if isinstance(choice, ModelKey):
        return (
            f"{subject} the model {choice.name!r} (a ModelKey), which no layer provides: add "
            "its layer (ModelKey.layer) to the runtime's."
        )
    return (
        f"{subject} the model {choice!r}, which this runtime has not opened: open_runtime opens "
        "the model strings of the agents and of the models= it is given."
    )


def missing_models(
    agent: Agent, available: Iterable[ServiceKey[Any]], override: ModelChoice | None = None
) -> MissingModels | None:
    """The named models ``agent`` (with ``override`` as its run's model) can reach that are not
    among ``available`` — None when every one is there. (The runtime's own model, when missing,
    is named by the usual preflight.) Pure."""
    missing = _missing(agent, available, override)
    return MissingModels(missing.values()) if missing else None


def _missing(
    agent: Agent, available: Iterable[ServiceKey[Any]], override: ModelChoice | None
) -> dict[ServiceKey[Any], tuple[MissingRequirement, ModelChoice]]:
    present = set(available)
    missing: dict[ServiceKey[Any], tuple[MissingRequirement, ModelChoice]] = {}
    for choice, who in _reached(agent, override, "", set()):
        if choice is None:
            continue
        key = model_key(choice)
        if key not in present and key not in missing:
            missing[key] = (MissingRequirement(key, who), choice)
    return missing


@final
class ResolvedModels:
    """The models one agent's runs ask, and what records call each."""

    __slots__ = ("grace", "grace_name", "summary", "summary_name", "turns", "turns_name")

    def __init__(
        self,
        turns: LanguageModel,
        turns_name: str | None,
        grace: LanguageModel,
        grace_name: str | None,
        summary: LanguageModel,
        summary_name: str | None,
    ) -> None:
        self.turns, self.turns_name = turns, turns_name
        self.grace, self.grace_name = grace, grace_name
        self.summary, self.summary_name = summary, summary_name

    @property
    def native_output(self) -> bool:
        """Whether every model that answers turns takes an output schema natively."""
        return bool(getattr(self.turns, "native_output", False)) and bool(
            getattr(self.grace, "native_output", False)
        )


def resolve_models(
    agent: Agent, context: Context, override: ModelChoice | None = None
) -> ResolvedModels:
    """The models of ``agent``'s runs (``override``: the run's own) from ``context`` (checked by
    :func:`missing_models` first)."""
    turns_choice = override if override is not None else agent.model
    turns = context.require(model_key(turns_choice))
    turns_name = choice_name(turns_choice)

    def role(choice: ModelChoice | None) -> tuple[LanguageModel, str | None]:
        if choice is None:
            return turns, turns_name
        model = context.require(model_key(choice))
        return model, choice_name(choice)

    grace, grace_name = role(agent.grace_model)
    summary, summary_name = role(agent.summary_model)
    return ResolvedModels(turns, turns_name, grace, grace_name, summary, summary_name)

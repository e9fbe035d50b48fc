"""Model activation: the ``activate_skill`` tool, for authors who let the model choose skills.

:func:`activation_tool` builds an ordinary readonly :class:`~effectagent.Tool` whose one
parameter is a skill ID, and the Layer of its handler. Its description lists the library's skills
(IDs and descriptions, from the manifests: discovery metadata only) — all but the untrusted ones,
unless the authorization allows untrusted skills; the error for an unknown ID lists the same, and a
hidden skill's ID is answered as unknown (a refusal of its own would tell that it exists). The
handler activates the skill with the same checks as host activation — authorization for the run's
agent and principal, the framework range, the required tools against the agent's toolkit and the
required services against those the tool was given, every file's digest — and returns the
instructions with the skill's ID, version and digest. The engine settles the call as a canonical
``ToolCallSettled`` record, so which skill, in which version and with which content a run used is
in its log.

A refusal is a :class:`SkillActivationFailed` the model reads (with its ``kind``), never a
defect: the model can choose another skill or go on without one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeAlias

import attrs

from effectagent.ai import Handler, Tool, ToolCallContext, Toolkit
from effectagent.effect import Context, Layer, Scope, ServiceKey, TaggedError

from .._rules import items_of
from ._access import SkillAuthorization
from ._errors import (
    SkillError,
    SkillIncompatible,
    SkillRefused,
    SkillRequirementsMissing,
    SkillTampered,
    SkillUntrusted,
)
from ._library import SkillInfo, SkillLibrary, _framework, activate_info
from ._semver import Version

__all__ = [
    "ActivateSkill",
    "FailureKind",
    "SkillActivation",
    "SkillActivationFailed",
    "SkillInstructions",
    "activation_tool",
]

FailureKind: TypeAlias = Literal[
    "unknown-skill",
    "untrusted",
    "refused",
    "incompatible",
    "missing-requirements",
    "tampered",
    "unreadable",
]
"""Why the model's activation failed: no such skill, untrusted, refused by the authorization, the
framework version is outside its range, a required tool or service is missing, a file changed, or
a file cannot be read."""


@attrs.frozen
class ActivateSkill:
    """The ``activate_skill`` tool's parameters."""

    skill_id: str
    """The ID of the skill to activate, one of those the tool's description lists."""


@attrs.frozen
class SkillInstructions:
    """What the model gets back from an activation: the skill's instructions, with what
    identifies exactly the skill it read — ``skill_id``, ``version`` and ``digest`` — and the
    paths of its assets."""

    skill_id: str
    version: str
    digest: str
    instructions: str
    assets: list[str]


@attrs.frozen
class SkillActivationFailed(TaggedError):
    """The model asked for a skill that cannot be activated: ``kind`` says why (see
    :data:`FailureKind`), ``message`` explains in words."""

    skill_id: str
    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return self.message


@attrs.frozen(eq=False)  # identity, like the Tool it holds
class SkillActivation:
    """The activation tool built by :func:`activation_tool`.

    ``tool`` goes in the agent's toolkit — ``toolkit`` is the tools given to
    :func:`activation_tool` with the activation tool added, the toolkit required tools are
    checked against — and ``layer`` in the runtime's layers. ``library`` is the skills offered.
    """

    tool: Tool[ActivateSkill, SkillInstructions]
    layer: Layer
    toolkit: Toolkit
    library: SkillLibrary


def _kind(error: SkillError) -> FailureKind:
    if isinstance(error, SkillUntrusted):
        return "untrusted"
    if isinstance(error, SkillRefused):
        return "refused"
    if isinstance(error, SkillIncompatible):
        return "incompatible"
    if isinstance(error, SkillRequirementsMissing):
        return "missing-requirements"
    if isinstance(error, SkillTampered):
        return "tampered"
    return "unreadable"


def _echoed(skill_id: str) -> str:
    """The ID the model sent, as an error repeats it: quoted, and cut past the 64 characters a
    skill ID may have (the model may send any text)."""
    if len(skill_id) <= 64:
        return repr(skill_id)
    return f"{skill_id[:64]!r}… ({len(skill_id)} characters)"


def _offered(library: SkillLibrary, authorization: SkillAuthorization) -> list[SkillInfo]:
    """The skills the model is told of: an untrusted skill the host does not allow is never
    activated, so neither the tool's description nor its errors name it."""
    return [
        skill for skill in library if skill.trust != "untrusted" or authorization.allow_untrusted
    ]


def _describe(offered: list[SkillInfo], description: str | None) -> str:
    lines = [
        description
        or "Activate a skill: read its instructions before doing the task they describe. "
        "Activate one only when the task needs it.",
        "",
        "Available skills (skill_id: description):",
    ]
    lines.extend(f"- {skill.id}: {skill.description}" for skill in offered)
    if not offered:
        lines.append("(none)")
    return "\n".join(lines)


def activation_tool(
    library: SkillLibrary,
    tools: Toolkit | Iterable[Tool[Any, Any]] = (),
    *,
    services: Iterable[ServiceKey[Any]] = (),
    authorization: SkillAuthorization | None = None,
    name: str = "activate_skill",
    description: str | None = None,
    framework_version: Version | str | None = None,
) -> SkillActivation:
    """A readonly tool that lets the model activate the skills of ``library``, and its Layer.

    ``tools`` are the agent's other tools: a skill's required tools are checked against them and
    the activation tool (give the agent ``SkillActivation.toolkit``). ``services`` are the
    services offered to skills: the layer requires them — preflight names one that is missing
    when the runtime opens — and a skill requiring any other service is refused.
    ``authorization`` decides per agent, skill and principal (the run's author; default: trusted
    skills only); ``name`` and ``description`` (which comes before the list of skills) shape the
    tool; ``framework_version`` overrides the installed effectagent's version.

    Raises ``TypeError`` for arguments of the wrong type, ``ValueError`` when a tool of ``tools``
    has this tool's name.
    """
    if not isinstance(library, SkillLibrary):
        raise TypeError(
            f"activation_tool: library must be a SkillLibrary, got {type(library).__name__}"
        )
    if authorization is None:
        authorization = SkillAuthorization()
    elif not isinstance(authorization, SkillAuthorization):
        raise TypeError("activation_tool: authorization must be a SkillAuthorization")
    if description is not None and not isinstance(description, str):
        raise TypeError("activation_tool: description must be a str or None")
    keys: tuple[ServiceKey[Any], ...] = items_of(
        services,
        ServiceKey,
        whole="activation_tool: services must be a collection of ServiceKeys",
        each="activation_tool: services must be ServiceKeys",
        lone=(ServiceKey,),
    )
    framework = _framework(framework_version)
    offered = _offered(library, authorization)
    offered_by_id = {skill.id: skill for skill in offered}
    available = ", ".join(offered_by_id) or "none"
    tool: Tool[ActivateSkill, SkillInstructions] = Tool(
        name,
        _describe(offered, description),
        parameters=ActivateSkill,
        success=SkillInstructions,
        failure=SkillActivationFailed,
        readonly=True,
        idempotent=True,
        open_world=False,
    )
    others: tuple[Tool[Any, Any], ...] = items_of(
        tools,
        Tool,
        whole="activation_tool: tools must be a Toolkit or a collection of Tools",
        each="activation_tool: tools must be Tools",
        lone=(Tool,),
    )
    if any(other.name == name for other in others):
        raise ValueError(f"activation_tool: a tool given in tools is already named {name!r}")
    toolkit = Toolkit(tool, *others)
    tool_names = frozenset(toolkit.names)

    async def build(context: Context, _: Scope) -> Context:
        services_offered = frozenset(key.name for key in context)

        async def activate(params: ActivateSkill, call: ToolCallContext) -> SkillInstructions:
            """Activate the skill the model named for this call's agent and principal.

            Cancellation: as host activation — a cancellation while the files are read stops
            the read after the chunk being read; nothing is returned then.
            """
            # Only the skills offered: a hidden one is as unknown as a missing one (its own
            # refusal would tell the model that it exists).
            skill = offered_by_id.get(params.skill_id)
            if skill is None:
                raise SkillActivationFailed(
                    params.skill_id,
                    "unknown-skill",
                    f"there is no skill {_echoed(params.skill_id)}; available: {available}",
                )
            try:
                activated = await activate_info(
                    skill,
                    agent=call.agent_name,
                    principal=call.author,
                    tools=tool_names,
                    services=services_offered,
                    authorization=authorization,
                    framework=framework,
                )
            except SkillError as exc:
                raise SkillActivationFailed(skill.id, _kind(exc), str(exc)) from None
            return SkillInstructions(
                activated.id,
                str(activated.version),
                activated.digest,
                activated.instructions,
                [str(path) for path in activated.assets],
            )

        handler: Handler = activate
        return Context.of(tool.handler_key, handler)

    layer = Layer.from_build(
        f"skill activation {name!r}", provides=[tool.handler_key], requires=keys, build=build
    )
    return SkillActivation(tool, layer, toolkit, library)

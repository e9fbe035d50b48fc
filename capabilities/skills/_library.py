"""Discovery (manifests only) and activation (content, checked) of skills.

Design notes
------------
Skills are local, read-only directories. :func:`discover_skills` reads the ``skill.toml`` of
every skill directory under the given roots and nothing else: the instruction files and assets
are only resolved (their paths must stay inside their directory and name files that exist),
never opened — a library of many skills costs one small read each. What it returns, a
:class:`SkillLibrary`, is metadata: IDs, versions, descriptions, requirements, trust, digests.

Activation is where content is read, and it is the same for the host and for the model (the
``activate_skill`` tool): first the pure checks — the skill authorization (trust and rules), the
framework version range, the required tools (against the agent's toolkit) and services — so a
skill that may not or cannot be used is never read; then every file's digest is checked against
the manifest while the instruction file is read, in a worker thread. The result, an
:class:`ActivatedSkill`, is an immutable value: ID, version, digest, instructions and the asset
paths. What a run records of it is its ID, version and digest (CAP-008).

The files' sizes are bounded (``_files``: an instruction file, an asset, a skill's files
together) and checked before any is read. A cancellation while the files are read stops the
worker thread after the chunk (a MiB) it is reading; activation waits for it to end — so no
thread outlives it — and then raises the cancellation.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import os
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs
import outcome
import trio

from effectagent.ai import Tool, Toolkit
from effectagent.core import Agent, ContextItem
from effectagent.effect import ServiceKey

from ._access import SkillAuthorization
from ._errors import (
    DuplicateSkill,
    SkillError,
    SkillIncompatible,
    SkillNotFound,
    SkillRefused,
    SkillRequirementsMissing,
    SkillUntrusted,
)
from ._files import read_manifest, read_verified, resolve_inside
from ._manifest import MANIFEST_NAME, SkillManifest, Trust, parse_manifest
from ._semver import Version, VersionError

if TYPE_CHECKING:
    from ._tool import SkillActivation

__all__ = [
    "ActivatedSkill",
    "SkillInfo",
    "SkillLibrary",
    "check_activation",
    "discover_skills",
    "framework_version",
    "scan_skills",
]

#: The largest manifest discovery reads.
MAX_MANIFEST_BYTES: Final = 64 * 1024

#: What a host offers skills as services: service keys (a runtime's ``context`` is one) or names.
Services = Iterable[ServiceKey[Any] | str]


@functools.cache
def framework_version() -> Version:
    """The version of the installed ``effectagent`` distribution, which skills' ``framework``
    ranges are checked against. Raises :class:`SkillError` when it is not installed as a
    distribution (give ``framework_version=`` to activation then)."""
    try:
        text = importlib.metadata.version("effectagent")
    except importlib.metadata.PackageNotFoundError:
        raise SkillError(
            None,
            "effectagent is not installed as a distribution, so its version is unknown; "
            "pass framework_version= to activation",
        ) from None
    try:
        return Version.parse(text)
    except VersionError as exc:
        raise SkillError(None, f"effectagent's version is not semver: {exc}") from None


@attrs.frozen
class SkillInfo:
    """A discovered skill: its validated ``manifest`` and resolved ``directory``. Nothing of its
    content has been read."""

    manifest: SkillManifest
    directory: Path

    @property
    def id(self) -> str:
        """The skill's ID."""
        return self.manifest.id

    @property
    def version(self) -> Version:
        """The skill's version."""
        return self.manifest.version

    @property
    def description(self) -> str:
        """What the skill is for, as its manifest says."""
        return self.manifest.description

    @property
    def trust(self) -> Trust:
        """The skill's trust classification."""
        return self.manifest.trust

    @property
    def digest(self) -> str:
        """The integrity digest its manifest declares (checked against the files at activation)."""
        return self.manifest.digest

    @property
    def manifest_path(self) -> Path:
        """Where its manifest is."""
        return self.directory / MANIFEST_NAME


@attrs.frozen
class ActivatedSkill:
    """An activated skill: every check passed and its files matched their digests.

    ``instructions`` is the text of its instruction file as read and verified; ``assets`` are the
    resolved paths of its assets (verified at activation — a host reading them later reads them
    again). ``version`` and ``digest`` identify exactly what was activated.
    """

    id: str
    version: Version
    digest: str
    description: str
    instructions: str
    assets: tuple[Path, ...]
    directory: Path
    trust: Trust

    def context_item(self) -> ContextItem:
        """This skill as context for a run — ``runtime.run(agent, text, context=[skill.context_item()])``:
        the engine records it as a ``ContextAdded`` record (kind ``"skill"``, the skill's ID as
        ``source``, its version and digest) before the user's input, and the model reads the
        instructions from then on (CAP-008)."""
        return ContextItem(
            kind="skill",
            source=self.id,
            text=self.instructions,
            version=str(self.version),
            digest=self.digest,
        )


def _service_names(services: Services) -> frozenset[str]:
    # A lone name would be taken letter by letter, and the skill refused for missing the very
    # service the host named; a lone key is not iterable at all.
    if isinstance(services, str | bytes | ServiceKey) or not isinstance(services, Iterable):
        raise TypeError(
            "services must be a collection of ServiceKeys or names, not a "
            f"{type(services).__name__} (a one-item list for one)"
        )
    names = set()
    for item in services:
        if isinstance(item, ServiceKey):
            names.add(item.name)
        elif isinstance(item, str):
            names.add(item)
        else:
            raise TypeError(f"services must be ServiceKeys or names, got {type(item).__name__}")
    return frozenset(names)


def check_activation(
    skill: SkillInfo,
    *,
    agent: str,
    principal: str,
    tools: Collection[str],
    services: Collection[str],
    authorization: SkillAuthorization,
    framework: Version,
) -> None:
    """Every check activation makes before reading anything, in order. Pure.

    Raises :class:`SkillUntrusted` or :class:`SkillRefused` (the authorization's reason),
    :class:`SkillIncompatible` (``framework`` is outside the skill's range), or
    :class:`SkillRequirementsMissing` (naming every required tool not in ``tools`` and service
    not in ``services``).
    """
    manifest = skill.manifest
    decision = authorization.decide(manifest, agent, principal)
    if not decision.allowed:
        error = SkillUntrusted if decision.untrusted else SkillRefused
        raise error(manifest.id, decision.reason)
    if framework not in manifest.framework:
        raise SkillIncompatible(manifest.id, manifest.framework.text, str(framework))
    missing_tools = tuple(name for name in manifest.tools if name not in tools)
    missing_services = tuple(name for name in manifest.services if name not in services)
    if missing_tools or missing_services:
        raise SkillRequirementsMissing(manifest.id, agent, missing_tools, missing_services)


def _read(
    root: str, manifest: SkillManifest, stop: threading.Event
) -> tuple[str, tuple[Path, ...]]:
    text = read_verified(root, manifest.id, manifest.files, manifest.instructions, stop)
    assets = tuple(Path(os.path.realpath(os.path.join(root, asset))) for asset in manifest.assets)
    return text, assets


_T = TypeVar("_T")


async def run_stoppable(work: Callable[[threading.Event], _T]) -> _T:
    """``work(stop)`` in a worker thread (under Trio's default thread limiter), where it checks
    ``stop`` often.

    Cancellation: sets ``stop``, waits (shielded) for the thread to end — ``work`` returns or
    raises soon after — and raises the cancellation; what ``work`` returned is dropped. A
    cancellation before the thread started raises at once.
    """
    stop = threading.Event()
    ended = trio.Event()
    results: list[outcome.Outcome[_T]] = []
    token = trio.lowlevel.current_trio_token()

    def deliver(result: outcome.Outcome[_T]) -> None:  # in the thread, as it ends
        results.append(result)
        token.run_sync_soon(ended.set)

    async with trio.to_thread.current_default_thread_limiter():
        # Not ``trio.to_thread.run_sync``: it either waits for the thread without letting the
        # cancellation through, or abandons the thread without saying whether it started.
        trio.lowlevel.start_thread_soon(functools.partial(work, stop), deliver)
        try:
            await ended.wait()
        except trio.Cancelled:
            stop.set()
            with trio.CancelScope(shield=True):
                await ended.wait()
            raise
    return results[0].unwrap()


async def activate_info(
    skill: SkillInfo,
    *,
    agent: str,
    principal: str,
    tools: Collection[str],
    services: Collection[str],
    authorization: SkillAuthorization,
    framework: Version,
) -> ActivatedSkill:
    """:func:`check_activation`, then read and verify the files (in a worker thread).

    Cancellation: the checks do not wait; once reading has started, a cancellation stops it
    after the chunk being read and takes effect when the thread has ended (it is not
    abandoned); nothing is activated then.
    """
    check_activation(
        skill,
        agent=agent,
        principal=principal,
        tools=tools,
        services=services,
        authorization=authorization,
        framework=framework,
    )
    manifest = skill.manifest
    root = str(skill.directory)
    text, assets = await run_stoppable(functools.partial(_read, root, manifest))
    return ActivatedSkill(
        manifest.id,
        manifest.version,
        manifest.digest,
        manifest.description,
        text,
        assets,
        skill.directory,
        manifest.trust,
    )


def _check_library(skills: Iterable[SkillInfo]) -> tuple[SkillInfo, ...]:
    given: object = skills  # checked at run time: not every caller runs mypy
    if isinstance(given, str | bytes | SkillInfo) or not isinstance(given, Iterable):
        raise TypeError(
            f"a SkillLibrary takes a collection of SkillInfo values, not a {type(given).__name__}"
        )
    found = tuple(skills)
    for skill in found:
        if not isinstance(skill, SkillInfo):
            raise TypeError(f"a SkillLibrary holds SkillInfo values, got {type(skill).__name__}")
    found = tuple(sorted(found, key=lambda skill: skill.id))
    for first, second in itertools.pairwise(found):
        if first.id == second.id:
            raise DuplicateSkill(first.id, (first.directory, second.directory))
    return found


@attrs.frozen
class SkillLibrary:
    """The skills discovery found, sorted by ID (IDs are unique). Only metadata: nothing of a
    skill's content is read until it is activated."""

    skills: tuple[SkillInfo, ...] = attrs.field(converter=_check_library)
    _by_id: Mapping[str, SkillInfo] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {skill.id: skill for skill in self.skills})

    @property
    def ids(self) -> tuple[str, ...]:
        """The skills' IDs, sorted."""
        return tuple(self._by_id)

    def __iter__(self) -> Iterator[SkillInfo]:
        return iter(self.skills)

    def __len__(self) -> int:
        return len(self.skills)

    def __contains__(self, skill_id: object) -> bool:
        return skill_id in self._by_id

    def get(self, skill_id: str) -> SkillInfo | None:
        """The skill with this ID, if any."""
        return self._by_id.get(skill_id)

    def require(self, skill_id: str) -> SkillInfo:
        """The skill with this ID; raises :class:`SkillNotFound` listing the IDs there are."""
        found = self._by_id.get(skill_id)
        if found is None:
            raise SkillNotFound(skill_id, self._by_id)
        return found

    async def activate(
        self,
        skill_id: str,
        *,
        agent: Agent,
        services: Services = (),
        principal: str = "user",
        authorization: SkillAuthorization | None = None,
        framework_version: Version | str | None = None,
    ) -> ActivatedSkill:
        """Activate the skill ``skill_id`` for a run of ``agent`` on behalf of ``principal`` (the
        run's ``author``).

        ``services`` are the services the host offers the skill — service keys or their names; a
        runtime's ``context`` offers everything it was opened with. ``authorization`` decides
        who may use which skill (default: trusted skills for everyone, see
        :class:`SkillAuthorization`); ``framework_version`` overrides the installed effectagent's
        version the skill's range is checked against.

        Raises :class:`SkillNotFound`, :class:`SkillUntrusted`, :class:`SkillRefused`,
        :class:`SkillIncompatible`, :class:`SkillRequirementsMissing` — all before reading any
        content — then :class:`SkillTampered` naming the file whose digest differs or
        :class:`SkillUnreadable`.

        Cancellation: a cancellation while the files are read stops the read after the chunk
        (a MiB) being read, and takes effect once its worker thread has ended; nothing is
        activated then.
        """
        if not isinstance(skill_id, str):
            raise TypeError(f"skill_id must be a str, got {type(skill_id).__name__}")
        if not isinstance(agent, Agent):
            raise TypeError(f"agent must be an Agent, got {type(agent).__name__}")
        if not isinstance(principal, str):
            raise TypeError(f"principal must be a str, got {type(principal).__name__}")
        if authorization is not None and not isinstance(authorization, SkillAuthorization):
            raise TypeError(
                f"authorization must be a SkillAuthorization, got {type(authorization).__name__}"
            )
        return await activate_info(
            self.require(skill_id),
            agent=agent.name,
            principal=principal,
            tools=frozenset(agent.toolkit.names),
            services=_service_names(services),
            authorization=authorization if authorization is not None else SkillAuthorization(),
            framework=_framework(framework_version),
        )

    def activation_tool(
        self,
        tools: Toolkit | Iterable[Tool[Any, Any]] = (),
        *,
        services: Iterable[ServiceKey[Any]] = (),
        authorization: SkillAuthorization | None = None,
        name: str = "activate_skill",
        description: str | None = None,
        framework_version: Version | str | None = None,
    ) -> SkillActivation:
        """The ``activate_skill`` tool over this library and its Layer: see
        :func:`~capabilities.skills.activation_tool`, which takes the same arguments."""
        from ._tool import activation_tool  # here: _tool imports this module

        return activation_tool(
            self,
            tools,
            services=services,
            authorization=authorization,
            name=name,
            description=description,
            framework_version=framework_version,
        )


def _framework(value: Version | str | None) -> Version:
    if value is None:
        return framework_version()
    if isinstance(value, Version):
        return value
    if isinstance(value, str):
        return Version.parse(value)
    raise TypeError(f"framework_version must be a Version or str, got {type(value).__name__}")


def _skill_dirs(root: str) -> Iterator[str]:
    if not os.path.isdir(root):
        raise SkillError(None, f"the skill root {root} is not a directory")
    if os.path.lexists(os.path.join(root, MANIFEST_NAME)):
        yield root  # the root is one skill directory itself
        return
    with os.scandir(root) as entries:
        names = sorted(entry.name for entry in entries if not entry.name.startswith("."))
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path) and os.path.lexists(os.path.join(path, MANIFEST_NAME)):
            yield path


def _load(directory: str) -> SkillInfo:
    root = os.path.realpath(directory)
    manifest_path = Path(root) / MANIFEST_NAME
    manifest = parse_manifest(manifest_path, read_manifest(root, MAX_MANIFEST_BYTES))
    resolve_inside(root, manifest_path, "instructions", manifest.instructions, manifest.id)
    for i, asset in enumerate(manifest.assets):
        resolve_inside(root, manifest_path, f"assets[{i}]", asset, manifest.id)
    return SkillInfo(manifest, Path(root))


def scan_skills(*roots: str | os.PathLike[str]) -> SkillLibrary:
    """:func:`discover_skills`, blocking the calling thread (for scripts and tools)."""
    if not roots:
        raise ValueError("discover_skills needs at least one root directory")
    found: dict[str, SkillInfo] = {}  # by resolved directory: a root given twice, or a skill
    for root in roots:  # linked from two roots, is one skill, not a duplicate of itself
        for directory in _skill_dirs(os.fspath(root)):
            skill = _load(directory)
            found.setdefault(str(skill.directory), skill)
    return SkillLibrary(found.values())


async def discover_skills(*roots: str | os.PathLike[str]) -> SkillLibrary:
    """The skills under ``roots``: each root is a directory of skill directories, and each
    subdirectory holding a ``skill.toml`` is a skill (others, and names starting with ``.``, are
    not skills and are passed over); a root that holds a ``skill.toml`` itself is one skill.

    Reads the manifests and nothing else: the instruction files and assets are resolved — they
    must stay inside their skill directory and exist — but not opened. Raises
    :class:`SkillManifestError` (naming the file and the field; :class:`SkillPathEscapes` for a
    path that leaves its directory) for the first manifest that does not validate,
    :class:`DuplicateSkill` when two directories declare one ID (one directory reached twice —
    a root given twice, a skill linked from two roots — is one skill), :class:`SkillError` for a root
    that is not a directory. A broken skill is never skipped silently.

    Cancellation: the scan runs in a worker thread and is not abandoned; a cancellation takes
    effect when it finishes, and nothing is returned.
    """
    for root in roots:
        if not isinstance(root, str | os.PathLike):
            raise TypeError(f"skill roots must be paths, got {type(root).__name__}")
    library = await trio.to_thread.run_sync(functools.partial(scan_skills, *roots))
    await trio.lowlevel.checkpoint_if_cancelled()  # a cancellation during the scan: no result
    return library

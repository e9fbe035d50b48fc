"""Skills (CAP-008): local, trusted, read-only directories of instructions and assets that a host —
or, when the author allows it, the model — activates for a run, with the skill's identity and
version recorded in the run's log.

* :func:`discover_skills` reads the ``skill.toml`` manifests under some roots (and nothing else)
  into a :class:`SkillLibrary` of metadata; the manifest's schema is in ``_manifest``'s notes and
  :func:`compute_integrity` writes its integrity section.
* :meth:`SkillLibrary.activate` checks the skill authorization (trust, rules per agent, skill and
  principal), the framework version range, the required tools and services, then reads the
  content and verifies every file's digest: an :class:`ActivatedSkill`, immutable.
* :func:`activation_tool` is the ``activate_skill`` tool and its Layer, for model activation.
"""

from ._access import SkillAuthorization as SkillAuthorization
from ._access import SkillDecision as SkillDecision
from ._access import SkillRule as SkillRule
from ._access import SkillSubject as SkillSubject
from ._errors import DuplicateSkill as DuplicateSkill
from ._errors import SkillError as SkillError
from ._errors import SkillIncompatible as SkillIncompatible
from ._errors import SkillManifestError as SkillManifestError
from ._errors import SkillNotFound as SkillNotFound
from ._errors import SkillPathEscapes as SkillPathEscapes
from ._errors import SkillRefused as SkillRefused
from ._errors import SkillRequirementsMissing as SkillRequirementsMissing
from ._errors import SkillTampered as SkillTampered
from ._errors import SkillUnreadable as SkillUnreadable
from ._errors import SkillUntrusted as SkillUntrusted
from ._files import Integrity as Integrity
from ._files import compute_integrity as compute_integrity
from ._library import ActivatedSkill as ActivatedSkill
from ._library import SkillInfo as SkillInfo
from ._library import SkillLibrary as SkillLibrary
from ._library import check_activation as check_activation
from ._library import discover_skills as discover_skills
from ._library import framework_version as framework_version
from ._library import scan_skills as scan_skills
from ._manifest import MANIFEST_NAME as MANIFEST_NAME
from ._manifest import SkillManifest as SkillManifest
from ._manifest import Trust as Trust
from ._manifest import canonical_listing as canonical_listing
from ._manifest import digest_of_listing as digest_of_listing
from ._manifest import parse_manifest as parse_manifest
from ._semver import Version as Version
from ._semver import VersionError as VersionError
from ._semver import VersionRange as VersionRange
from ._tool import ActivateSkill as ActivateSkill
from ._tool import FailureKind as FailureKind
from ._tool import SkillActivation as SkillActivation
from ._tool import SkillActivationFailed as SkillActivationFailed
from ._tool import SkillInstructions as SkillInstructions
from ._tool import activation_tool as activation_tool

__all__ = [
    "ActivatedSkill",
    "ActivateSkill",
    "DuplicateSkill",
    "FailureKind",
    "Integrity",
    "MANIFEST_NAME",
    "SkillActivation",
    "SkillActivationFailed",
    "SkillAuthorization",
    "SkillDecision",
    "SkillError",
    "SkillIncompatible",
    "SkillInfo",
    "SkillInstructions",
    "SkillLibrary",
    "SkillManifest",
    "SkillManifestError",
    "SkillNotFound",
    "SkillPathEscapes",
    "SkillRefused",
    "SkillRequirementsMissing",
    "SkillRule",
    "SkillSubject",
    "SkillTampered",
    "SkillUnreadable",
    "SkillUntrusted",
    "Trust",
    "Version",
    "VersionError",
    "VersionRange",
    "activation_tool",
    "canonical_listing",
    "check_activation",
    "compute_integrity",
    "digest_of_listing",
    "discover_skills",
    "framework_version",
    "parse_manifest",
    "scan_skills",
]

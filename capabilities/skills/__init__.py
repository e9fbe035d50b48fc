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

Every refusal is a :class:`SkillError` naming the skill and the reason; exported besides are the
ones a host handles differently — a manifest that does not validate (:class:`SkillManifestError`,
naming the file and the field) and one of its paths leaving the skill directory
(:class:`SkillPathEscapes`), an unknown ID (:class:`SkillNotFound`) and a file changed since its
digest was written (:class:`SkillTampered`). A bad manifest, a duplicate ID, an incompatible
framework range, missing tools or services, an unreadable file and an authorization refusal are
``SkillError``\\ s whose message says which.
"""

from ._access import SkillAuthorization as SkillAuthorization
from ._access import SkillDecision as SkillDecision
from ._access import SkillRule as SkillRule
from ._access import SkillSubject as SkillSubject
from ._errors import SkillError as SkillError
from ._errors import SkillManifestError as SkillManifestError
from ._errors import SkillNotFound as SkillNotFound
from ._errors import SkillPathEscapes as SkillPathEscapes
from ._errors import SkillTampered as SkillTampered
from ._files import Integrity as Integrity
from ._files import compute_integrity as compute_integrity
from ._library import ActivatedSkill as ActivatedSkill
from ._library import SkillInfo as SkillInfo
from ._library import SkillLibrary as SkillLibrary
from ._library import discover_skills as discover_skills
from ._tool import activation_tool as activation_tool

__all__ = [
    "ActivatedSkill",
    "Integrity",
    "SkillAuthorization",
    "SkillDecision",
    "SkillError",
    "SkillInfo",
    "SkillLibrary",
    "SkillManifestError",
    "SkillNotFound",
    "SkillPathEscapes",
    "SkillRule",
    "SkillSubject",
    "SkillTampered",
    "activation_tool",
    "compute_integrity",
    "discover_skills",
]

"""``capabilities.skills``' public surface: complete, documented, our own (the checks
``tests/capabilities/test_exports.py`` makes for the other capability packages)."""

from __future__ import annotations

import types

import capabilities.skills as skills
from tests.effect.test_exports import _attribute_doc, _is_data, _own_docstring


def test_every_name_is_unique_importable_and_documented() -> None:
    names = list(skills.__all__)
    assert len(names) == len(set(names))
    namespace: dict[str, object] = {}
    exec("from capabilities.skills import *", namespace)
    assert [n for n in names if n not in namespace] == []
    undocumented = []
    for name in names:
        obj = getattr(skills, name)
        doc = (
            _attribute_doc("capabilities.skills", name, obj)
            if _is_data(obj)
            else _own_docstring(obj)
        )
        if not doc or not doc.strip():
            undocumented.append(name)
    assert undocumented == []


def test_no_public_attribute_is_left_out_and_every_export_is_ours() -> None:
    exported = set(skills.__all__)
    leaked = [
        name
        for name, value in vars(skills).items()
        if not name.startswith("_")
        and name not in exported
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith("capabilities."))
    ]
    assert leaked == []
    for name in exported:
        obj = getattr(skills, name)
        if not _is_data(obj):
            assert str(getattr(obj, "__module__", "")).startswith("capabilities.skills."), name


def test_the_errors_the_guide_names_are_exported_and_are_the_ones_raised() -> None:
    """The skills guide names ``SkillManifestError`` and ``SkillPathEscapes`` as what discovery
    raises: a host catches them from the package, not from a private module."""
    from capabilities.skills import _errors

    assert skills.SkillManifestError is _errors.SkillManifestError
    assert skills.SkillPathEscapes is _errors.SkillPathEscapes
    assert issubclass(skills.SkillPathEscapes, skills.SkillManifestError)
    assert issubclass(skills.SkillManifestError, skills.SkillError)

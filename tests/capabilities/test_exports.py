"""The curated public surface of the capabilities packages: complete, documented, nothing leaking
(the same checks ``tests/effect/test_exports.py`` makes for the base packages)."""

from __future__ import annotations

import importlib
import types
from typing import Any

import pytest

from tests.effect.test_exports import _attribute_doc, _is_data, _own_docstring

PACKAGES = [
    "capabilities",
    "capabilities.storage",
    "capabilities.sessions",
    "capabilities.state",
    "capabilities.steering",
    "capabilities.approval",
    "capabilities.authorization",
    "capabilities.compaction",
    "capabilities.code_mode",
    "capabilities.mcp",
    "capabilities.skills",
    "capabilities.subagents",
    "capabilities.telemetry",
]


def _names(package: str) -> list[str]:
    return list(importlib.import_module(package).__all__)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_is_unique_importable_and_documented(package: str) -> None:
    module = importlib.import_module(package)
    names = _names(package)
    assert len(names) == len(set(names))
    namespace: dict[str, Any] = {}
    exec(f"from {package} import *", namespace)
    assert [n for n in names if n not in namespace] == []
    undocumented = []
    for name in names:
        obj = getattr(module, name)
        doc = _attribute_doc(package, name, obj) if _is_data(obj) else _own_docstring(obj)
        if not doc or not doc.strip():
            undocumented.append(name)
    assert undocumented == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_attribute_is_left_out_of_all(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(_names(package))
    leaked = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and name not in exported
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith("capabilities."))
    ]
    assert leaked == []


@pytest.mark.parametrize("package", PACKAGES)
def test_exports_are_our_own(package: str) -> None:
    module = importlib.import_module(package)
    for name in _names(package):
        obj = getattr(module, name)
        owner = getattr(obj, "__module__", None)
        if not _is_data(obj):
            assert isinstance(owner, str)
            assert owner.startswith("capabilities."), name

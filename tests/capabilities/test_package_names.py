"""A name ``capabilities`` re-exports never hides one of its subpackages: ``import
capabilities.code_mode as cm`` (or ``capabilities.skills.…``) must give the module, not a function
that happens to share its name."""

from __future__ import annotations

import importlib
import pkgutil
import types

import capabilities


def test_no_re_exported_name_shadows_a_subpackage() -> None:
    subpackages = [
        module.name
        for module in pkgutil.iter_modules(capabilities.__path__)
        if not module.name.startswith("_")
    ]
    assert {"approval", "code_mode", "mcp", "skills", "subagents", "telemetry"} <= set(subpackages)
    for name in subpackages:
        importlib.import_module(f"capabilities.{name}")
        assert isinstance(getattr(capabilities, name), types.ModuleType), name
        assert name not in capabilities.__all__, name

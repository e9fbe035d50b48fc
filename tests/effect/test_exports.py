"""The curated public surface of each package: complete, documented, and nothing leaking.

Add a package to ``PACKAGES`` when it gets a public ``__init__``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import pkgutil
import types
from typing import Any

import pytest

PACKAGES = [
    "effectagent",
    "effectagent.effect",
    "effectagent.ai",
    "effectagent.core",
    "effectagent.engine",
    "effectagent.testing",
    "effectagent.providers",
    "sandbox",
]


def _public_names(package: str) -> list[str]:
    module = importlib.import_module(package)
    names = module.__all__
    assert isinstance(names, list | tuple)
    return list(names)


def _own_docstring(obj: Any) -> str | None:
    """The object's own docstring (a class does not count its base class's)."""
    if isinstance(obj, type):
        doc = obj.__dict__.get("__doc__")
        return doc if isinstance(doc, str) else None
    return inspect.getdoc(obj)


def _is_data(obj: Any) -> bool:
    """A type alias or constant: it cannot carry a docstring of its own."""
    if hasattr(obj, "__wrapped__"):  # a decorated function (functools.cache, ...) documents itself
        return False
    return not isinstance(
        obj, type | types.FunctionType | types.BuiltinFunctionType | types.ModuleType
    )


def _attribute_doc(package: str, name: str, obj: Any) -> str | None:
    """The Sphinx-style documentation of a module-level assignment ``name = ...`` in the submodule
    that defines ``obj``: ``#:`` comment lines right above it, or a string literal right below."""
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}."):
        submodule = importlib.import_module(info.name)
        if getattr(submodule, name, None) is not obj:
            continue
        source = inspect.getsource(submodule)
        lines = source.splitlines()
        body = ast.parse(source).body
        for index, stmt in enumerate(body):
            if not _assigns(stmt, name):
                continue
            following = body[index + 1] if index + 1 < len(body) else None
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                return following.value.value
            above = list(
                itertools.takewhile(
                    lambda line: line.startswith("#:"), reversed(lines[: stmt.lineno - 1])
                )
            )
            if above:
                return "\n".join(reversed(above))
    return None


def _assigns(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    return False


@pytest.mark.parametrize("package", PACKAGES)
def test_all_has_no_duplicates(package: str) -> None:
    names = _public_names(package)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_importable(package: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"from {package} import *", namespace)
    missing = [name for name in _public_names(package) if name not in namespace]
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_documented(package: str) -> None:
    module = importlib.import_module(package)
    undocumented = []
    for name in _public_names(package):
        obj = getattr(module, name)
        doc = _attribute_doc(package, name, obj) if _is_data(obj) else _own_docstring(obj)
        if not doc or not doc.strip():
            undocumented.append(name)
    assert undocumented == [], "no docstring (or, for an alias or constant, no `#:` comment)"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_attribute_is_in_all(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(_public_names(package))
    leaked = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and name not in exported
        # A subpackage or submodule of this package is an attribute too, but not a re-export.
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith(f"{package}."))
    ]
    assert leaked == [], "public names in the package namespace but not in __all__"


@pytest.mark.parametrize("package", PACKAGES)
def test_exports_come_from_our_own_modules(package: str) -> None:
    """A re-export is one of ours (not a stray ``import trio`` leaking through)."""
    module = importlib.import_module(package)
    root = package.split(".")[0]
    foreign = []
    for name in _public_names(package):
        obj = getattr(module, name)
        owner = getattr(obj, "__module__", None)
        if _is_data(obj):
            defined_here = any(
                getattr(importlib.import_module(info.name), name, None) is obj
                for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}.")
            )
            if not defined_here:
                foreign.append(name)
        elif not isinstance(owner, str) or not owner.startswith(f"{root}."):
            foreign.append(name)
    assert foreign == []

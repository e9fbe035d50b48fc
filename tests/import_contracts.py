"""An import-linter contract type of our own: packages import each other's *public* names only.

A package here is ``effectagent.effect``, ``effectagent.ai``, ``effectagent.core``,
``effectagent.engine``, ``effectagent.testing``, ``sandbox`` and ``capabilities`` (each with its
subpackages). Inside a package, modules import each other's private modules freely; across
packages, an import may only name a module whose path below the package has no part starting with
``_`` — the curated ``__init__`` and public submodules. So every name one package takes from
another is one its ``__init__`` re-exports (and the export tests pin), never an implementation
detail.

Registered in ``pyproject.toml`` (``contract_types``) and run by ``lint-imports`` (``make test``).
"""

from __future__ import annotations

from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output

__all__ = ["PublicNamesContract", "package_of", "reaches_into"]


def package_of(module: str, packages: list[str]) -> str | None:
    """The longest of ``packages`` that ``module`` is, or is inside of."""
    found = [p for p in packages if module == p or module.startswith(p + ".")]
    return max(found, key=len) if found else None


def reaches_into(imported: str, package: str) -> bool:
    """Whether ``imported`` (inside ``package``) is a private module of it."""
    rest = imported[len(package) :].lstrip(".")
    return any(part.startswith("_") for part in rest.split(".") if part)


class PublicNamesContract(Contract):
    """Across the listed packages, only modules with no private path part may be imported."""

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        packages: list[str] = [str(p) for p in self.packages]  # type: ignore[attr-defined]
        broken: list[dict[str, Any]] = []
        for importer in sorted(graph.modules):
            source = package_of(importer, packages)
            if source is None:
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                target = package_of(imported, packages)
                if target is None or target == source or not reaches_into(imported, target):
                    continue
                lines = [
                    detail["line_number"]
                    for detail in graph.get_import_details(importer=importer, imported=imported)
                ]
                broken.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for item in check.metadata["broken"]:
            lines = ", ".join(f"l.{n}" for n in item["lines"])
            output.print_error(
                f"{item['importer']} imports {item['imported']} ({lines}), a private module of "
                "another package: import the name from that package's __init__",
                bold=False,
            )
            output.new_line()

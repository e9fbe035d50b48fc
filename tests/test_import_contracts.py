"""The public-names contract (tests/import_contracts.py) that ``lint-imports`` runs in make test:
it breaks on a private module reached across packages, and on nothing else."""

from __future__ import annotations

from grimp import ImportGraph

from .import_contracts import PublicNamesContract, package_of, reaches_into

PACKAGES = ["effectagent.effect", "effectagent.core", "effectagent.engine", "sandbox"]


def _check(*imports: tuple[str, str]) -> list[dict[str, object]]:
    graph = ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="x")
    contract = PublicNamesContract(
        name="public names", session_options={}, contract_options={"packages": PACKAGES}
    )
    broken: list[dict[str, object]] = contract.check(graph, verbose=False).metadata["broken"]
    return broken


def test_a_private_module_of_another_package_breaks_the_contract() -> None:
    broken = _check(("effectagent.core._records", "effectagent.effect._schema"))
    assert broken == [
        {
            "importer": "effectagent.core._records",
            "imported": "effectagent.effect._schema",
            "lines": [1],
        }
    ]


def test_public_names_and_private_modules_of_the_same_package_are_fine() -> None:
    assert (
        _check(
            ("effectagent.core._records", "effectagent.effect"),
            ("effectagent.core._records", "effectagent.core._outcomes"),
            ("sandbox._deno", "effectagent.effect"),
            ("effectagent.engine._driver", "trio._core"),  # not one of ours
        )
        == []
    )


def test_the_innermost_package_is_the_one_that_counts() -> None:
    assert package_of("effectagent.effect._schema", ["effectagent", "effectagent.effect"]) == (
        "effectagent.effect"
    )
    assert package_of("trio", PACKAGES) is None
    assert reaches_into("sandbox._deno.pool", "sandbox")
    assert reaches_into("sandbox.cli._main", "sandbox")
    assert not reaches_into("sandbox.cli", "sandbox")

"""Every Python example of the docs passes ``mypy --strict``, as a user would copy it.

The README promises a library typed end to end: an example pasted into a project checked by strict
mypy must not bring errors with it. Each ```python block of README.md, docs/*.md and
docs/guides/*.md (found as ``tests/test_docs_examples.py`` finds them) is written to a module of
its own, and one mypy run — the project's strict configuration, with the cache that
``tests/typing/test_types.py`` uses — checks them all; a failure lists the errors of each page and
block.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_docs_examples import BLOCK, ROOT, _pages_with_examples
from tests.typing.test_types import run_mypy

PAGES = sorted(_pages_with_examples())
REPORTED = re.compile(r"^(?P<path>[^:]+\.py):(?P<line>\d+): error: (?P<message>.*)$")


def _module_name(page: str, index: int) -> str:
    """A module name of its own for each block (``docs/guides/engine.md``, 3 ->
    ``docs_guides_engine_3``): unlike the library's modules, since errors are sorted by it."""
    return re.sub(r"\W", "_", page.removesuffix(".md")).lower() + f"_{index}"


@pytest.fixture(scope="module")
def errors_by_block(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], list[str]]:
    """(page, block index) -> the errors mypy reports for that block, from one run over them all."""
    folder = tmp_path_factory.mktemp("docs_examples")
    blocks: dict[str, tuple[str, int]] = {}
    for page in PAGES:
        for index, source in enumerate(BLOCK.findall((ROOT / page).read_text())):
            name = _module_name(page, index)
            (folder / f"{name}.py").write_text(source)
            blocks[name] = (page, index)
    reported = run_mypy(sorted(str(folder / f"{name}.py") for name in blocks))
    found: dict[tuple[str, int], list[str]] = {block: [] for block in blocks.values()}
    for line in reported.splitlines():
        match = REPORTED.match(line)
        if match is None:
            continue
        # By module name, not folder: mypy replays the errors of a module its cache holds with
        # the path it had then (another run's folder). Errors of the library itself are left to
        # `make typecheck`.
        name = Path(match["path"]).stem
        if name in blocks:
            found[blocks[name]].append(f"line {match['line']}: {match['message']}")
    return found


def test_the_pages_are_found() -> None:
    assert {"README.md", "docs/guides/engine.md", "docs/guides/tools.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of_the_page_pass_strict_mypy(
    page: str, errors_by_block: dict[tuple[str, int], list[str]]
) -> None:
    failing = {
        index: errors
        for (name, index), errors in sorted(errors_by_block.items())
        if name == page and errors
    }
    report = "\n".join(
        f"{page} example {index}:\n" + "\n".join(f"  {error}" for error in errors)
        for index, errors in failing.items()
    )
    assert not failing, f"strict mypy rejects examples of {page}:\n{report}"

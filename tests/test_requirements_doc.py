"""docs/requirements.md must stay true: every test it names exists, every requirement has a row."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "requirements.md").read_text()


def test_every_named_test_exists() -> None:
    node_ids = set(re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", DOC))
    assert len(node_ids) > 40
    missing = []
    for path, name in sorted(node_ids):
        source = ROOT / path
        # Exactly one definition: a second one of the name would shadow the first unseen.
        if not source.exists() or (
            len(re.findall(rf"^(?:async )?def {name}\(", source.read_text(), re.M)) != 1
        ):
            missing.append(f"{path}::{name}")
    assert missing == []


def test_every_test_file_named_whole_exists() -> None:
    files = set(re.findall(r"`(tests/[\w/]+\.py)`", DOC))
    assert sorted(f for f in files if not (ROOT / f).is_file()) == []


def test_every_named_module_exists() -> None:
    modules = set(re.findall(r"`((?:effectagent|sandbox|capabilities)/[\w/]*\.py)`", DOC))
    assert modules
    assert sorted(m for m in modules if not (ROOT / m).exists()) == []


def test_every_capability_requirement_has_a_row() -> None:
    rows = set(re.findall(r"^\| (CAP-\d{3}) \|", DOC, re.M))
    assert rows == {f"CAP-{i:03d}" for i in range(1, 18)}


#: A module named in the table, then what of it the row points at in parentheses.
_POINTED = re.compile(
    r"`((?:effectagent|sandbox|capabilities)/[\w/]*\.py)` \(([^()]*(?:\([^()]*\)[^()]*)*)\)"
)


def test_every_name_pointed_at_in_a_module_is_in_it() -> None:
    """A row's ``module.py`` (`Name`, `Class.method`) must still hold those names: a refactor
    that moves one elsewhere has to move the pointer too."""
    pointed = _POINTED.findall(DOC)
    assert len(pointed) > 40
    missing = []
    for path, inside in pointed:
        source = (ROOT / path).read_text()
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", inside):
            if name.endswith(".py"):  # a file beside it, named alone
                if not (ROOT / path).with_name(name).exists():
                    missing.append(f"{path}: {name}")
            elif any(not re.search(rf"\b{re.escape(p)}\b", source) for p in name.split(".")):
                missing.append(f"{path}: {name}")
    assert missing == []


def test_every_row_that_is_not_unstarted_names_a_test() -> None:
    """Status "done" or "partial" is a claim with a proof: the row names at least one test."""
    rows = [line for line in DOC.splitlines() if line.startswith("| ") and line[2:5] != "ID "]
    unproven = [
        row.split(" | ")[0]
        for row in rows
        if " | not started" not in row and not re.search(r"`tests/[\w/]+\.py(::\w+)?`", row)
    ]
    assert len(rows) > 90
    assert unproven == []

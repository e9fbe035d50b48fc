"""CAP-010 through the public constructor: a posture that would claim more than it is, or that
could only be read wrongly, is refused where it is made — not only the one spelled with the
enum member."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox import Isolation, SandboxImplementation


def _posture(**given: Any) -> SandboxImplementation:
    fields: dict[str, Any] = {
        "name": "mine",
        "version": "1",
        "isolation": Isolation.UNISOLATED,
        "is_security_boundary": False,
        "enforced_limits": frozenset({"cpu"}),
        "unenforced_limits": frozenset({"memory"}),
    }
    return SandboxImplementation(**(fields | given))


def test_an_isolation_spelled_as_its_string_is_refused_not_let_claim_a_boundary() -> None:
    with pytest.raises(TypeError, match="isolation must be an Isolation, got str 'unisolated'"):
        _posture(isolation="unisolated", is_security_boundary=True)
    with pytest.raises(TypeError, match="isolation must be an Isolation, got str 'namespaces'"):
        _posture(isolation="namespaces")


@pytest.mark.parametrize("claim", [1, "yes", None])
def test_the_boundary_claim_must_be_a_bool(claim: object) -> None:
    with pytest.raises(TypeError, match="is_security_boundary must be a bool"):
        _posture(isolation=Isolation.NAMESPACES, is_security_boundary=claim)


@pytest.mark.parametrize("field", ["enforced_limits", "unenforced_limits"])
def test_a_lone_limit_name_is_refused_never_read_as_its_letters(field: str) -> None:
    with pytest.raises(
        TypeError, match=f"{field} must be a collection of limit names, got the str"
    ):
        _posture(**{field: "cpu"})


def test_notes_given_as_one_str_are_refused() -> None:
    with pytest.raises(TypeError, match="notes must be a collection of str"):
        _posture(notes="one note")


def test_an_honest_posture_is_made_as_given() -> None:
    posture = _posture(notes=["a note"])
    assert posture.isolation is Isolation.UNISOLATED
    assert posture.is_security_boundary is False
    assert posture.enforces("cpu")
    assert not posture.enforces("memory")
    assert posture.notes == ("a note",)
    isolated = _posture(isolation=Isolation.NAMESPACES, is_security_boundary=True)
    assert isolated.is_security_boundary is True

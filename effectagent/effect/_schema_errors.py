"""How a decoding failure is described: the public error types and the issue plumbing behind them.

Every part of decoding — the limits guard, the converter's hooks, the public entry points — reports
failures in the same shape: a list of ``(path, message)`` issues that becomes one
:class:`SchemaError`.  That shared vocabulary lives here, below all of them, so the limits guard
and the converter never depend on each other or on the public module that assembles them.  It
also holds the set of Python types that are JSON scalars, which both the guard and the converter
test against and which must not drift apart.
"""

from __future__ import annotations

import json
from typing import ClassVar, Final

import attrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from effectagent.effect._errors import TaggedError
from effectagent.effect._json_schema import describe_value
from effectagent.effect._schema_fields import object_fields

__all__ = ["SchemaError", "SchemaIssue"]

_NONE_TYPE: Final = type(None)
_SCALARS: Final = frozenset({str, int, float, bool, _NONE_TYPE})
_MAX_SHOWN_ISSUES: Final = 20
#: The most issues one decode reports: the first ones found. Past it, a hostile input (a hundred
#: thousand bad items, nested sixty levels deep) would cost time and memory per issue and level.
_MAX_ISSUES: Final = 100
#: The longest object key a path shows whole; a longer one is cut, ending in "…" (the input's
#: keys are as long as it likes, and every issue under a key repeats it).
_MAX_KEY_SHOWN: Final = 64


@attrs.frozen
class SchemaIssue:
    """One problem with an input: where (``$.items[2].qty``) and what, in plain words."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@attrs.frozen
class SchemaError(TaggedError):
    """Input does not match a schema (an expected error).

    ``issues`` lists every problem found, each with its path — up to the first 100: past them
    the input is not explained further; ``str()`` renders them as a message a model can act on,
    e.g. ``invalid input: $.items[2].qty: expected an integer, got 'three'``. A path shows an
    object key of more than 64 characters cut, ending in ``…``.
    """

    tag: ClassVar[str] = "SchemaError"

    issues: tuple[SchemaIssue, ...]

    def __str__(self) -> str:
        return self.explain("invalid input")

    def explain(self, headline: str) -> str:
        """The issues under ``headline``: one issue on the same line (``headline: $.a: ...``),
        several one per line after a count, at most 20 shown (``- ... and 3 more``)."""
        if len(self.issues) == 1:
            return f"{headline}: {self.issues[0]}"
        lines = [f"{headline} ({len(self.issues)} issues):"]
        lines += [f"- {issue}" for issue in self.issues[:_MAX_SHOWN_ISSUES]]
        if len(self.issues) > _MAX_SHOWN_ISSUES:
            lines.append(f"- ... and {len(self.issues) - _MAX_SHOWN_ISSUES} more")
        return "\n".join(lines)


# --- error plumbing -----------------------------------------------------------------------------


class _Invalid(Exception):
    """Raised by our hooks: issues as (path relative to the hook's value, message)."""

    def __init__(self, issues: list[tuple[str, str]]) -> None:
        super().__init__(issues)
        self.issues = issues


class _TooComplex(Exception):
    """The union-attempt budget of one decode ran out."""


def _invalid(message: str) -> _Invalid:
    return _Invalid([("", message)])


def _mismatch(expected: str, value: object) -> _Invalid:
    return _invalid(f"expected {expected}, got {describe_value(value)}")


def _field_seg(name: str) -> str:
    return f".{name}" if len(name) <= _MAX_KEY_SHOWN and name.isidentifier() else _key_seg(name)


def _key_seg(key: object) -> str:
    if isinstance(key, str) and len(key) > _MAX_KEY_SHOWN:
        key = key[: _MAX_KEY_SHOWN - 1] + "…"
    return f"[{json.dumps(key, ensure_ascii=False)}]"


def _issues_from(exc: BaseException, prefix: str) -> list[tuple[str, str]]:
    """Flatten a structuring failure into ``(path, message)`` pairs; re-raise defects."""
    if isinstance(exc, _Invalid):
        return [(prefix + path, message) for path, message in exc.issues[:_MAX_ISSUES]]
    if isinstance(exc, ClassValidationError):
        out: list[tuple[str, str]] = []
        with_notes, others = exc.group_exceptions()
        for sub, note in with_notes:
            path = prefix + _field_seg(note.name)
            if type(sub) is KeyError:
                out.append((path, "missing required field"))
            else:
                out.extend(_issues_from(sub, path))
        for sub in others:
            if isinstance(sub, ForbiddenExtraKeysError):
                allowed = ", ".join(field.name for field in object_fields(exc.cl))
                message = f"unexpected field (allowed fields: {allowed})"
                extra = sorted(sub.extra_fields)[:_MAX_ISSUES]
                out.extend((prefix + _field_seg(key), message) for key in extra)
            else:
                out.extend(_issues_from(sub, prefix))
        return out[:_MAX_ISSUES]
    if isinstance(exc, ValueError | TypeError):  # e.g. an attrs validator in __init__
        return [(prefix, f"invalid value: {exc}")]
    raise exc

"""Schema-versioned values: user-typed data stored as JSON, lifted from older versions on read.

Session metadata and agent state slots are values of a type the application declares (an attrs
class, usually). They are stored as JSON beside the schema version they were written with. When
the application's type changes, it bumps the version and registers one function per step that
lifts the stored JSON of version ``n`` to version ``n + 1``; reading an older value runs the steps
in order and then decodes the result strictly. A version with no path to the current one — a
newer version, a missing step — is an error, never a best-effort decode.

Everything here is pure (no I/O) and raises the plain exceptions below; each capability turns
them into its own typed errors, naming its own identifiers.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, final

from effectagent.effect import SchemaError, decode, encode_as, is_async_callable

__all__ = [
    "Migration",
    "StoredValueCorrupt",
    "ValueRejected",
    "ValueTooLarge",
    "VersionedCodec",
    "VersionUnsupported",
    "dumps",
    "loads",
    "check_migrations",
]

T = TypeVar("T")

#: A step lifting stored JSON from one schema version to the next.
Migration = Callable[[Any], Any]


class ValueRejected(Exception):
    """The value does not conform to its declared type: ``paths`` say where (no values)."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        super().__init__(paths)
        self.paths = paths


class ValueTooLarge(Exception):
    """The value's JSON is larger than allowed."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(size, limit)
        self.size = size
        self.limit = limit


class VersionUnsupported(Exception):
    """The stored version has no path to the current one (newer, or a step is missing)."""

    def __init__(self, version: int, current: int) -> None:
        super().__init__(version, current)
        self.version = version
        self.current = current


class StoredValueCorrupt(Exception):
    """The stored JSON is damaged, a migration failed, or the result does not decode."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def dumps(data: Any) -> str:
    """Compact JSON text, ASCII-only: a lone surrogate in user text is escaped rather than refused
    by SQLite's UTF-8 encoding, and reads back as the same string. (One encoder for every call:
    ``json.dumps`` with options builds a new one each time.)"""
    return _ENCODER.encode(data)


def loads(text: str) -> Any:
    """Parse stored JSON strictly (``NaN``/``Infinity`` are not JSON). Raises ``ValueError`` or
    ``RecursionError``."""
    return _DECODER.decode(text)


def check_migrations(
    version: int, migrations: Mapping[int, Migration], *, what: str = "stored value"
) -> None:
    """Raise ``ValueError`` unless ``version`` is at least 1 and every migration key is a version
    below it (a step from ``n`` to ``n + 1``); ``TypeError`` for ``migrations`` that is not a
    mapping, a migration that is not callable, or one that is an ``async def`` function (or an
    async generator function): a read calls it plainly, and what it returns — a coroutine or an
    async generator, never the lifted JSON — would make every older ``what`` (as the message names it: ``"value of slot
    'prefs'"``) read as damaged."""
    if type(version) is not int or version < 1:
        raise ValueError(f"a schema version is an integer of at least 1, got {version!r}")
    given: object = migrations  # not every caller runs mypy
    if not isinstance(given, Mapping):
        raise TypeError(
            "migrations must be a mapping from the version each lifts from to its function, "
            f"got {type(given).__name__}"
        )
    for step in migrations:
        if type(step) is not int or not 1 <= step < version:
            raise ValueError(
                f"migration keys are the versions they lift from (1 to {version - 1}), got {step!r}"
            )
        migration = migrations[step]
        if not callable(migration):
            raise TypeError(f"the migration from version {step} is not callable")
        if is_async_callable(migration) or inspect.isasyncgenfunction(migration):
            raise TypeError(
                f"the migration from version {step} is an async function: a migration is a "
                f"plain function of the stored JSON, called as it is when an older {what} is read"
            )


@final
class VersionedCodec(Generic[T]):
    """Dumps values of ``tp`` to JSON text and loads them back from any supported version. Pure.
    Its migrations are checked by :func:`check_migrations` (``what`` names its values there)."""

    __slots__ = ("_migrations", "max_bytes", "tp", "version")

    def __init__(
        self,
        tp: Any,
        version: int,
        migrations: Mapping[int, Migration],
        max_bytes: int,
        *,
        what: str = "stored value",
    ) -> None:
        check_migrations(version, migrations, what=what)
        if type(max_bytes) is not int or max_bytes < 2:
            raise ValueError(f"max_bytes must be an integer of at least 2, got {max_bytes!r}")
        self.tp = tp
        self.version = version
        self._migrations = dict(migrations)
        self.max_bytes = max_bytes

    def dump(self, value: T) -> str:
        """The JSON text of ``value``, checked against the declared type all the way down.

        Raises :class:`ValueRejected` (with the paths of every problem) or :class:`ValueTooLarge`.
        """
        try:
            data = encode_as(self.tp, value)
        except SchemaError as exc:
            raise ValueRejected(tuple(issue.path for issue in exc.issues)) from None
        text = dumps(data)
        # ASCII-only text: one character is one byte.
        if len(text) > self.max_bytes:
            raise ValueTooLarge(len(text), self.max_bytes)
        return text

    def load(self, version: int, text: str) -> T:
        """Decode stored ``text`` written with schema ``version``, lifting it to the current
        version first. Raises :class:`VersionUnsupported` or :class:`StoredValueCorrupt`."""
        if type(version) is not int or not 1 <= version <= self.version:
            raise VersionUnsupported(version, self.version)
        missing = [step for step in range(version, self.version) if step not in self._migrations]
        if missing:
            raise VersionUnsupported(version, self.version)
        try:
            data = loads(text)
        except (ValueError, RecursionError, TypeError):
            raise StoredValueCorrupt("the stored value is not JSON") from None
        for step in range(version, self.version):
            try:
                data = self._migrations[step](data)
            except Exception as exc:
                raise StoredValueCorrupt(
                    f"the migration from version {step} failed ({type(exc).__name__})"
                ) from None
        try:
            return decode(self.tp, data)  # type: ignore[no-any-return]
        except SchemaError as exc:
            paths = ", ".join(issue.path for issue in exc.issues[:5])
            raise StoredValueCorrupt(
                f"the stored value does not match version {self.version} (at {paths})"
            ) from None

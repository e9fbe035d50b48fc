"""How canonical records are stored: a tagged union over the record classes, as versioned JSON.

A stored record is three values: its **type tag** (the record class's name — ``Record`` is a union
of classes, and the tag picks the member, so no decoder ever guesses between look-alike members),
the **schema version** it was written with, and its **body**, the record encoded by the project's
schema layer (a converter from ``effectagent.effect.make_json_converter``: strict both ways, no
NaN, unknown keys refused). Reading it back gives a record ``==`` to the one written — except for
exception-valued fields, which compare by identity in Python; for those the type and every field
come back.

Two rules the stock converter does not know are configured here, as plain functions:

* A field declared as :class:`~effectagent.core.RunError` holds one of its subclasses. Encoding by
  the declared class would drop the subclass and its fields, so a ``RunError`` is stored with its
  stable ``tag`` (``{"_tag": "BudgetExhausted", "dimension": …}``) and decoded back into the class
  of that tag — a tagged union over the attrs subclasses, found when first needed (a subclass
  defined later is found then too). A tag two classes share cannot be written. A field at its
  default value is left out (it decodes back to it).
* Records are encoded by their own class; the tag column says which class decodes the body.

Pure: no I/O. The SQLite log calls :meth:`RecordCodec.encode` in the caller's task (so a record
that cannot be stored fails before anything is queued) and :meth:`RecordCodec.decode` per row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, final, get_args

import cattrs
from cattrs.gen import make_dict_unstructure_fn

from effectagent.core import Record, RunError, UserInputRecorded
from effectagent.effect import make_json_converter

from .._versioned import Migration, dumps, loads
from ._errors import CorruptRecord, UnknownRecordVersion

__all__ = ["RECORD_SCHEMA_VERSION", "EncodedRecord", "RecordCodec", "record_types"]

#: The schema version records are written with.
RECORD_SCHEMA_VERSION: Final = 1

#: (type tag, schema version, JSON body, steering input ID or None) of one record.
EncodedRecord = tuple[str, int, str, str | None]


def record_types() -> dict[str, type]:
    """Every member of the ``Record`` union, by its type tag (the class name)."""
    return {cls.__name__: cls for cls in get_args(Record)}


def _subclasses(base: type) -> list[type]:
    found: list[type] = []
    stack = [base]
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


@final
class _RunErrorTags:
    """The tagged union of ``RunError`` subclasses, by their ``tag``."""

    __slots__ = ("_by_tag", "_converter", "_unstructure")

    def __init__(self, converter: cattrs.Converter) -> None:
        self._converter = converter
        self._by_tag: dict[str, type] = {}
        self._unstructure: dict[type, Callable[[Any], dict[str, Any]]] = {}

    def _refresh(self) -> None:
        by_tag: dict[str, type] = {}
        for cls in _subclasses(RunError):
            if "__attrs_attrs__" not in cls.__dict__:
                # Not an attrs class itself: the class statement's own class, which a slotted
                # attrs decorator replaced (it lingers among the subclasses until collected).
                continue
            tag = cls.tag  # type: ignore[attr-defined]  # every TaggedError class has one
            by_tag.setdefault(tag, cls)
            if by_tag[tag] is not cls:
                by_tag[tag] = _Ambiguous
        self._by_tag = by_tag

    def class_of(self, tag: str) -> type | None:
        cls = self._by_tag.get(tag)
        if cls is None:
            self._refresh()
            cls = self._by_tag.get(tag)
        return None if cls is _Ambiguous else cls

    def unstructure(self, error: RunError) -> dict[str, Any]:
        cls = type(error)
        if self.class_of(cls.tag) is not cls:
            raise TypeError(f"the RunError tag {cls.tag!r} does not name {cls.__qualname__} alone")
        fields = self._unstructure.get(cls)
        if fields is None:
            # A field at its default is not stored (it decodes back to it): a field added to a
            # RunError with a default leaves every error stored without it as it was.
            fields = self._unstructure[cls] = make_dict_unstructure_fn(
                cls, self._converter, _cattrs_omit_if_default=True
            )
        data: dict[str, Any] = {"_tag": cls.tag}
        data.update(fields(error))
        return data

    def structure(self, data: Any, _: Any) -> RunError:
        if type(data) is not dict or type(data.get("_tag")) is not str:
            raise ValueError("a RunError is an object with a string _tag")
        fields = dict(data)
        cls = self.class_of(fields.pop("_tag"))
        if cls is None:
            raise ValueError("a RunError tag no class has")
        if cls is RunError:  # the base itself: structuring it would come back to this hook
            if fields:
                raise ValueError("the base RunError has no fields")
            return RunError()
        return self._converter.structure(fields, cls)


class _Ambiguous:
    """Stands for a tag that more than one RunError class has."""


@final
class RecordCodec:
    """Encodes records to (tag, version, body) and decodes them back. Pure; one per store."""

    __slots__ = ("_converter", "_migrations", "_types", "version")

    def __init__(
        self,
        *,
        version: int = RECORD_SCHEMA_VERSION,
        migrations: Mapping[tuple[str, int], Migration] | None = None,
    ) -> None:
        converter = make_json_converter()
        tags = _RunErrorTags(converter)
        converter.register_unstructure_hook_func(
            lambda tp: isinstance(tp, type) and issubclass(tp, RunError), tags.unstructure
        )
        converter.register_structure_hook_func(lambda tp: tp is RunError, tags.structure)
        self._converter = converter
        self._types = record_types()
        self.version = version
        # (type tag, version n) -> the step lifting a body of version n to n + 1.
        self._migrations = dict(migrations or {})

    def is_record(self, value: object) -> bool:
        """Whether ``value`` is an instance of a member of the ``Record`` union."""
        return self._types.get(type(value).__name__) is type(value)

    def encode(self, record: Record) -> EncodedRecord:
        """The stored form of ``record``. Raises ``TypeError``/``ValueError`` when it does not
        encode (the caller turns that into ``RecordNotEncodable``)."""
        tag = type(record).__name__
        if self._types.get(tag) is not type(record):
            raise TypeError(f"{type(record).__qualname__} is not a member of the Record union")
        body = dumps(self._converter.unstructure(record))
        delivered = (
            record.input_id
            if type(record) is UserInputRecorded and record.kind in ("steering", "follow-up")
            else None
        )
        return tag, self.version, body, delivered

    def decode(self, conversation_id: str, seq: int, tag: str, version: int, body: str) -> Record:
        """The record stored as (``tag``, ``version``, ``body``) at ``seq`` of the conversation.

        Raises :class:`UnknownRecordVersion` for a type or version this code does not know (a
        newer writer), :class:`CorruptRecord` for a body that is not JSON or does not match.
        """
        if type(tag) is not str or type(version) is not int or version < 1 or type(body) is not str:
            raise CorruptRecord(conversation_id, seq, "the type tag, version or body is damaged")
        cls = self._types.get(tag)
        if cls is None or version > self.version:
            raise UnknownRecordVersion(conversation_id, seq, tag, version, self.version)
        try:
            data = loads(body)
        except (ValueError, RecursionError, TypeError):
            raise CorruptRecord(conversation_id, seq, "the body is not JSON") from None
        for step in range(version, self.version):
            migrate = self._migrations.get((tag, step))
            if migrate is None:
                raise UnknownRecordVersion(conversation_id, seq, tag, version, self.version)
            try:
                data = migrate(data)
            except Exception as exc:
                detail = f"migrating {tag} from version {step} failed ({type(exc).__name__})"
                raise CorruptRecord(conversation_id, seq, detail) from None
        try:
            return self._converter.structure(data, cls)
        except Exception:
            # A body nested past the recursion limit lands here too: the converter's detailed
            # validation reports the RecursionError as a mismatch of the class it was in.
            detail = f"the body does not match {tag} version {self.version}"
        raise CorruptRecord(conversation_id, seq, detail)

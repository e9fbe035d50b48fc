"""Tagged, declared errors.

An expected error is a value: a frozen attrs exception class with a stable ``tag``. Functions, tools and
services *declare* the error classes they may fail with; anything else that escapes them is a defect
(see :mod:`effectagent.effect._cause`). Subclass :class:`TaggedError` and decorate with
``@attrs.frozen``; the tag defaults to the class name and can be pinned with ``tag = "..."`` in the
class body so renaming the class never changes the wire format.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

__all__ = ["TaggedError"]


@attrs.frozen
class TaggedError(Exception):
    """Base class of declared, expected errors.

    ``tag`` is the stable identity of the error on every wire (events, records, Code Mode envelopes);
    ``is_retryable`` says whether trying the same operation again may succeed.
    """

    tag: ClassVar[str] = "TaggedError"
    is_retryable: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "tag" not in cls.__dict__:
            cls.tag = cls.__name__

    def __str__(self) -> str:
        """``Tag(field=value, ...)``, each field shown as the class's ``repr`` shows it: a field
        with ``repr=False`` is left out and one with ``repr=<callable>`` (a mask for a token)
        shown through it — never its raw value."""
        fields = attrs.fields(type(self)) if attrs.has(type(self)) else ()
        if not fields:
            return self.tag
        inner = ", ".join(f"{f.name}={_shown(f, getattr(self, f.name))}" for f in fields if f.repr)
        return f"{self.tag}({inner})"


def _shown(field: attrs.Attribute[Any], value: object) -> str:
    render = field.repr
    return render(value) if callable(render) else repr(value)

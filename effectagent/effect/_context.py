"""Service keys and the immutable Context.

A service is named by one :class:`ServiceKey` object (identity is the key; the name is for people) and
shaped by a Protocol the key is parameterised with: ``Approval: ServiceKey[ApprovalService] =
ServiceKey("effectagent.Approval")``. A :class:`Context` maps keys to implementations and never
changes; adding returns a new Context.

What they are given is checked where it is given: a key's name is a non-empty str, and a Context
holds only ServiceKeys (``TypeError`` naming what else it was given) — checked when a Context is
made from outside, not again when one is derived from another (``only``, ``merge``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar, final, overload

__all__ = ["Context", "MissingServiceError", "ServiceKey"]

T = TypeVar("T")
D = TypeVar("D")

_MISSING: Any = object()


@final
class ServiceKey(Generic[T]):
    """The identity of a service. Two keys with the same name are still different services."""

    __slots__ = ("description", "name")

    def __init__(self, name: str, description: str = "") -> None:
        if not isinstance(name, str):
            raise TypeError(f"ServiceKey: name must be a str, got {type(name).__name__}")
        if not name:
            raise ValueError("ServiceKey: name must not be empty (it names the service in errors)")
        if not isinstance(description, str):
            raise TypeError(
                f"ServiceKey: description must be a str, got {type(description).__name__}"
            )
        self.name = name
        self.description = description

    def __repr__(self) -> str:
        return f"ServiceKey({self.name!r})"


class MissingServiceError(LookupError):
    """A service was looked up in a Context that does not provide it."""

    def __init__(self, key: ServiceKey[Any], available: Iterable[ServiceKey[Any]]) -> None:
        names = sorted(k.name for k in available)
        super().__init__(
            f"service {key.name!r} is not in this context "
            f"(available: {', '.join(names) if names else 'none'})"
        )
        self.key = key


@final
class Context(Mapping[ServiceKey[Any], Any]):
    """An immutable map from service keys to implementations."""

    __slots__ = ("_services",)

    _EMPTY: Context

    def __init__(self, services: Mapping[ServiceKey[Any], Any] | None = None) -> None:
        """``TypeError`` for a key that is not a :class:`ServiceKey`."""
        self._services: dict[ServiceKey[Any], Any] = dict(services) if services else {}
        for key in self._services:
            _check_key("Context", key)

    @staticmethod
    def _of(services: dict[ServiceKey[Any], Any]) -> Context:
        # A Context of services already checked (derived from Contexts): no second walk.
        context = object.__new__(Context)
        context._services = services
        return context

    @staticmethod
    def empty() -> Context:
        """The context with no services."""
        return _EMPTY

    @staticmethod
    def of(key: ServiceKey[T], service: T) -> Context:
        """A context with one service."""
        _check_key("Context.of", key)
        return Context._of({key: service})

    def add(self, key: ServiceKey[T], service: T) -> Context:
        """A new context with ``key`` bound to ``service`` (replacing any earlier binding)."""
        _check_key("Context.add", key)
        services = dict(self._services)
        services[key] = service
        return Context._of(services)

    def merge(self, other: Mapping[ServiceKey[Any], Any]) -> Context:
        """A new context with the services of both; ``other`` wins on conflicts."""
        if not isinstance(other, Context):
            other = Context(other)  # checks its keys
        if not other:
            return self
        if not self._services:
            return other
        services = dict(self._services)
        services.update(other._services)
        return Context._of(services)

    def only(self, keys: Iterable[ServiceKey[Any]]) -> Context:
        """A new context restricted to ``keys`` (keys not present are simply absent)."""
        return Context._of({k: self._services[k] for k in keys if k in self._services})

    @overload
    def get(self, key: ServiceKey[T], /) -> T | None: ...
    @overload
    def get(self, key: ServiceKey[T], default: D, /) -> T | D: ...
    def get(self, key: ServiceKey[Any], default: Any = None, /) -> Any:
        """The service for ``key``, or ``default``."""
        return self._services.get(key, default)

    def require(self, key: ServiceKey[T]) -> T:
        """The service for ``key``; raises :class:`MissingServiceError` naming what is available."""
        service = self._services.get(key, _MISSING)
        if service is _MISSING:
            raise MissingServiceError(key, self._services)
        return service  # type: ignore[no-any-return]

    def __getitem__(self, key: ServiceKey[T]) -> T:
        return self.require(key)

    def __contains__(self, key: object) -> bool:
        return key in self._services

    def __iter__(self) -> Iterator[ServiceKey[Any]]:
        return iter(self._services)

    def __len__(self) -> int:
        return len(self._services)

    def __repr__(self) -> str:
        return f"Context({', '.join(k.name for k in self._services)})"


def _check_key(owner: str, key: object) -> None:
    if not isinstance(key, ServiceKey):
        raise TypeError(f"{owner}: key must be a ServiceKey, got {type(key).__name__}")


_EMPTY = Context()

"""Where the command keeps what it stores, decided in one place for every subcommand.

By default, the SQLite database ``effectagent.db`` in the state directory: one machine. With a
PostgreSQL URL — ``EFFECTAGENT_STORAGE``, else the config file's ``storage`` — the tables in
the schema ``EFFECTAGENT_STORAGE_SCHEMA``, else ``storage_schema`` (``effectagent``) of that
database instead, which the processes of any number of machines share: ``chat`` and ``run``
there, ``sessions`` and ``history`` read it, ``admin`` acts on its submissions, ``worker`` and
``serve`` run them.

:func:`choose_store` decides (pure; :func:`store_of` from a command's arguments); a
:class:`Store` names it for messages (a file's path, or the URL without its password), gives the
Layer of every persistent capability on it (``chat``, ``run``, ``sessions``, ``history``), and
opens its database alone (``admin``, ``worker``, ``serve``) — both from the same Layers of
``capabilities``, so the schema is laid out alike whichever command opens it first. The
PostgreSQL driver is imported only for a PostgreSQL store: without it, opening one says what to
install.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Final

import attrs

from capabilities import postgres_storage, sqlite_storage
from capabilities.storage import Database, DatabaseService
from effectagent import Layer
from effectagent.effect import build_layer, open_scope

from ._common import DATABASE, Unavailable, UsageError, describe
from ._config import (
    DEFAULT_SCHEMA,
    Config,
    ConfigError,
    check_storage,
    check_storage_schema,
    config_path,
    load_config,
    state_dir,
)
from ._early import private_directory

__all__ = ["SCHEMA_VARIABLE", "STORAGE_VARIABLE", "Store", "choose_store", "store_of"]

#: The environment variable naming the storage: it overrides the config file's ``storage``.
STORAGE_VARIABLE: Final = "EFFECTAGENT_STORAGE"
#: The environment variable naming the PostgreSQL schema: it overrides ``storage_schema``.
SCHEMA_VARIABLE: Final = "EFFECTAGENT_STORAGE_SCHEMA"


@attrs.frozen
class Store:
    """The SQLite database at ``path``, or (``url`` given) the PostgreSQL database at ``url``,
    in ``schema``. ``url`` may hold a password: it is never shown, nor in this object's repr."""

    path: Path | None = None
    url: str | None = attrs.field(default=None, repr=False)
    schema: str = DEFAULT_SCHEMA

    def __attrs_post_init__(self) -> None:
        if (self.path is None) == (self.url is None):
            raise ValueError("a store is a path or a URL, exactly one of them")

    @property
    def name(self) -> str:
        """How a message names it: the file's path, or the URL without its password and the
        schema (``postgresql://ann@db/agents (schema effectagent)``)."""
        if self.url is None:
            return str(self.path)
        from capabilities.storage._postgres_names import redact_url  # the driver: its users only

        return f"{redact_url(self.url)} (schema {self.schema})"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The passwords its URL carries: kept out of what runs show, like the API keys."""
        if self.url is None:
            return ()
        try:
            from capabilities.storage._postgres_names import url_passwords
        except ImportError:  # no driver: nothing opens, and opening says what to install
            return ()
        return tuple(url_passwords(self.url))

    @property
    def missing(self) -> bool:
        """Whether it is known, without opening it, to hold nothing yet: an SQLite file that is
        not there. (A PostgreSQL database is known only by opening it: never missing here.)"""
        return self.path is not None and not self.path.is_file()

    def make_directory(self, *, tighten: bool) -> None:
        """Make the SQLite file's directory, for the user alone (``tighten``: narrow an existing
        one to 0700 too); nothing for PostgreSQL. Raises :class:`Unavailable` in a sentence."""
        if self.path is None:
            return
        try:
            private_directory(self.path.parent, tighten=tighten)
        except OSError as exc:
            raise Unavailable(
                f"the state directory {self.path.parent} cannot be made: {exc.strerror or exc}"
            ) from None

    def layer(self) -> Layer:
        """Every persistent capability on it (the Conversation Log, sessions, agent state,
        steering and the database): ``sqlite_storage`` or ``postgres_storage``."""
        if self.url is None:
            assert self.path is not None
            return sqlite_storage(self.path)
        return postgres_storage(self.url, schema=self.schema)

    def database_layer(self) -> Layer:
        """Its database alone, as :func:`layer` opens it."""
        from capabilities.storage._layers import postgres_database, sqlite_database

        if self.url is None:
            assert self.path is not None
            return sqlite_database(self.path)
        return postgres_database(self.url, schema=self.schema)

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Database]:
        """Its database, open for the block. What fails in opening it is :class:`Unavailable`,
        said in a sentence that names it without its password; what the block raises passes
        unchanged.

        Cancellation: opening is cancellable; the database is closed when the block ends."""
        async with AsyncExitStack() as stack:
            try:
                scope = await stack.enter_async_context(open_scope())
                context = await build_layer(self.database_layer(), scope)
            except (UsageError, Unavailable):
                raise
            except Exception as exc:
                raise Unavailable(describe(exc)) from None
            yield context[DatabaseService]


def choose_store(config: Config, given_state_dir: str | None, environ: Mapping[str, str]) -> Store:
    """Where the command keeps what it stores: ``$EFFECTAGENT_STORAGE`` (a PostgreSQL URL),
    else the config's ``storage``, else ``effectagent.db`` in the state directory
    (``given_state_dir``, else the XDG one); a PostgreSQL store's tables in the schema
    ``$EFFECTAGENT_STORAGE_SCHEMA``, else the config's ``storage_schema`` (an SQLite file has no
    schema: the variable is checked and then has no effect). Raises ``ConfigError`` for a
    variable it cannot use, in a sentence that does not quote a URL. Pure."""
    schema = config.storage_schema
    given_schema = environ.get(SCHEMA_VARIABLE, "")
    if given_schema.strip():
        problem = check_storage_schema(given_schema)
        if problem is not None:
            raise ConfigError(f"{SCHEMA_VARIABLE} {problem}")
        schema = given_schema
    given = environ.get(STORAGE_VARIABLE, "")
    if given.strip():
        problem = check_storage(given)
        if problem is not None:
            raise ConfigError(f"{STORAGE_VARIABLE} {problem}")
        return Store(url=given, schema=schema)
    if config.storage is not None:
        return Store(url=config.storage, schema=schema)
    return Store(path=state_dir(given_state_dir, environ) / DATABASE)


def store_of(args: argparse.Namespace, environ: Mapping[str, str], config: Config | None) -> Store:
    """:func:`choose_store` for a command's arguments (``--state-dir``) and ``config`` — read
    from the file (``--config``, else the default one) when None. Raises ``ConfigError``."""
    if config is None:
        config = load_config(config_path(getattr(args, "config", None), environ))
    return choose_store(config, args.state_dir, environ)

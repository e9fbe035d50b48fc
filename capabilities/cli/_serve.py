"""``effectagent serve``: :mod:`capabilities.serve` from the command line.

It reads the ``[serve]`` table of the config file (:func:`serve_settings`), opens the command's
storage (``_store``: the state directory's database, or the configured PostgreSQL one), and runs
the API with a worker — the agent ``assistant`` with the model, instructions and tools of the
configuration, as ``effectagent admin worker`` runs it — until SIGTERM or SIGINT, then drains
(see ``capabilities.serve``). Starlette and Hypercorn are imported only here, once the command
runs (the ``serve`` extra).

The ``[serve]`` table::

    [serve]
    listen = "127.0.0.1:8080"          # HOST:PORT (port 0: a free one, printed on start)
    grace = 30                         # seconds runs get to finish on SIGTERM
    max_body = 65536                   # bytes
    body_timeout = 30                  # seconds a request's whole body may take to arrive (408)
    anonymous = "guest"                # the principal of requests without a token (default: none)
    cors_origins = []                  # origins whose pages may call it (default: none)
    quota = { per_minute = 60, burst = 20 }   # each principal's admissions ("none": no limit)

    [serve.principals.ann]
    token_env = "ANN_TOKEN"            # the variable holding ann's bearer token …
    # token_sha256 = "…"               # … or its SHA-256 digest (hex)
    operator = false                   # operators see every conversation and the console's lists
    quota = { per_minute = 10, burst = 5 }
"""

from __future__ import annotations

import argparse
import signal
import tomllib
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from capabilities.storage import StorageError

from ._admin import AGENT, open_store, worker_agent
from ._args import EXIT_COMPLETED
from ._common import Unavailable, UsageError, describe
from ._config import ConfigError, _Table, config_path, load_config
from ._console import Console
from ._store import store_of

if TYPE_CHECKING:
    from capabilities.serve import Quota, ServeSettings

__all__ = ["serve", "serve_settings"]

_DEFAULT_LISTEN: Final = "127.0.0.1:8080"


def _quota(table: _Table, key: str, default: Quota | None) -> Quota | None:
    from capabilities.serve import Quota

    table.seen.add(key)
    if key not in table.data:
        return default
    value = table.data[key]
    if value == "none":
        return None
    inner = _Table(table.file, f"{table.name(key)}", value)
    try:
        quota = Quota(
            per_minute=inner.positive("per_minute", float, 60.0),
            burst=inner.positive("burst", int, 20),
        )
    except ValueError as exc:
        raise table.error(f"{table.name(key)}: {exc}") from None
    inner.done()
    return quota


def serve_settings(path: Path | None, environ: Mapping[str, str]) -> tuple[ServeSettings, str]:
    """The settings of the ``[serve]`` table in the config file at ``path`` and where to listen;
    raises ``ConfigError`` naming the file and the key for what it cannot use (a token variable
    that is not set or empty included — its value is never said)."""
    from capabilities.serve import DEFAULT_QUOTA, Principal, ServeSettings, Tokens, token_digest

    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8")).get("serve", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: cannot be read ({exc})") from None
    table = _Table(path or Path("config.toml"), "[serve]", data)
    listen = table.text("listen", _DEFAULT_LISTEN) or _DEFAULT_LISTEN
    grace = table.positive("grace", float, 30.0)
    max_body = table.positive("max_body", int, 64 * 1024)
    body_timeout = table.positive("body_timeout", float, 30.0)
    anonymous = table.text("anonymous")
    origins = table.strings("cors_origins")
    quota = _quota(table, "quota", DEFAULT_QUOTA)
    entries: list[tuple[str, Principal]] = []
    quotas: dict[str, Quota | None] = {}
    principals = _Table(table.file, "[serve.principals]", table.get("principals", dict, {}))
    for name in list(principals.data):
        entry = _Table(table.file, f"[serve.principals.{name}]", principals.get(name, dict))
        variable = entry.text("token_env")
        digest = entry.text("token_sha256")
        principal = Principal(name, operator=entry.get("operator", bool, False))
        if (variable is None) == (digest is None):
            raise entry.error(f"{entry.where} needs one of token_env or token_sha256")
        if variable is not None:
            token = environ.get(variable, "")
            if not token.strip():
                raise entry.error(
                    f"{entry.name('token_env')}: the variable {variable} is not set or empty"
                )
            digest = token_digest(token.strip())
        assert digest is not None
        if len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
            raise entry.error(f"{entry.name('token_sha256')} must be 64 hexadecimal characters")
        entries.append((digest.lower(), principal))
        if "quota" in entry.data:
            quotas[name] = _quota(entry, "quota", None)
        entry.done()
    principals.done()
    table.done()
    try:
        tokens = Tokens(entries, anonymous=Principal(anonymous) if anonymous else None)
        settings = ServeSettings(
            tokens=tokens,
            grace=grace,
            max_body=max_body,
            body_timeout=body_timeout,
            cors_origins=origins,
            quota=quota,
            quotas=quotas,
        )
    except ValueError as exc:
        raise table.error(f"[serve]: {exc}") from None
    return settings, listen


def _listening(listen: str, error: Exception) -> Exception:
    """What to say when the service could not start listening on ``listen``: the error (inside
    the exception groups of Hypercorn's nurseries) as a sentence, or the error itself."""
    leaf: BaseException = error
    while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, OSError):
        reason = leaf.strerror or str(leaf)
        return Unavailable(f"cannot listen on {listen}: {reason}")
    if isinstance(leaf, ValueError):
        return UsageError(f"cannot listen on {listen!r}: give HOST:PORT, e.g. 127.0.0.1:8080")
    return error


async def serve(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent serve``: until SIGTERM or SIGINT, then drains and exits 0.

    Cancellation (the signals do not cancel it: they start the drain): cancelled otherwise, the
    worker lets its lanes go and the server stops."""
    try:
        from capabilities.serve import ServeApi, ServeMetrics, metrics_available
        from capabilities.serve import serve as run_service
    except ImportError as exc:
        raise Unavailable(
            f"the Python package {exc.name} is not installed, and the command needs it: "
            "pip install 'effectagent[serve]'"
        ) from None
    from capabilities.durable import DurableWorker

    from ._main import _settings
    from ._tools import open_tools

    settings, listen = serve_settings(config_path(args.config, environ), environ)
    listen = args.listen or listen
    if not settings.tokens.principals:
        raise UsageError(
            "no principal may call the service: name one in [serve.principals.NAME] of the "
            "config file (or an anonymous principal)"
        )
    config, model = (
        _settings(args, environ)
        if not args.no_worker
        else (load_config(config_path(args.config, environ)), None)
    )
    store = store_of(args, environ, config)
    # The runtime's secrets: its worker's redaction, and the API's of the reasons people give
    # (aborts, approval decisions) — redacted before they are written.
    secrets = (*(() if model is None else model.secrets), *store.secrets)
    async with open_store(store, create=True) as database, AsyncExitStack() as stack:
        metrics = ServeMetrics() if metrics_available() else None
        api = ServeApi(
            database,
            settings,
            agents=None if model is None else (AGENT,),
            metrics=metrics,
            secrets=secrets,
        )
        relay = None
        if database.dialect == "postgresql":
            # The live text of workers in other processes (`effectagent worker`, another
            # `serve`), through the database; this process's own comes from its worker.
            from capabilities.serve import live_relay

            try:
                relay = await stack.enter_async_context(live_relay(database))
                await relay.follow(api.live)
            except StorageError as exc:
                raise Unavailable(describe(exc)) from None
        worker = None
        if model is not None:
            try:
                tooling = await stack.enter_async_context(open_tools(config))
            except (UsageError, Unavailable):
                raise
            except Exception as exc:
                raise Unavailable(describe(exc)) from None
            agent, layer = worker_agent(config, model, tooling)
            # live text to the event streams (and, through the relay, to other services'), and
            # the metrics
            layer = layer + api.listener(*(() if relay is None else (relay.listener(),)))
            worker = DurableWorker(database, layer, [agent], secrets=secrets)
            for note in tooling.notes:
                console.err.line(f"note: {note}")
        stop = trio.Event()
        refused: list[Exception] = []
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def on_signal() -> None:
                    async for signum in signals:
                        console.err.line(
                            f"{signal.Signals(signum).name}: draining — new submissions are "
                            f"refused, runs get {settings.grace:g} s to finish"
                        )
                        stop.set()
                        return

                nursery.start_soon(on_signal)
                try:
                    urls = await nursery.start(
                        lambda task_status: run_service(
                            api, stop, bind=listen, worker=worker, task_status=task_status
                        )
                    )
                except Exception as exc:  # Hypercorn's nurseries wrap what binding raised
                    refused.append(_listening(listen, exc))
                    nursery.cancel_scope.cancel()
                else:
                    console.err.line(
                        f"serving on {urls[0]} (console: {urls[0]}/console; database {store.name}; "
                        f"{'a worker' if worker else 'no worker'} here; SIGTERM drains)"
                    )
                    await stop.wait()
                    # the service drains and returns; this bounds it whatever happens
                    nursery.cancel_scope.deadline = trio.current_time() + settings.grace + 30
        if refused:
            raise refused[0]
    console.err.line("stopped: the runs still going wait for the next worker, which resumes them")
    return EXIT_COMPLETED

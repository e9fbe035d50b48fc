"""The ``effectagent`` command (``python -m capabilities.cli``) and its reusable pieces.

* ``effectagent chat`` — an interactive session with an agent; ``effectagent run "prompt"`` — one
  run, its exit status saying how it ended; ``effectagent sessions`` — the saved sessions;
  ``effectagent history SEARCH`` — what was said, searched. ``effectagent --help`` has the
  options, the config file and the exit statuses.
* :func:`load_config` — the command's TOML configuration, validated strictly (a
  :class:`ConfigError` names the file and the key); :class:`Config` is what it holds.
* :mod:`capabilities.cli.render` — :class:`~capabilities.cli.render.Timeline`, a run's events as a
  timeline on a text stream (what ``effectagent chat`` shows; ``make demo`` uses it too), with
  every character a terminal would obey or hide escaped (``\\x1b``, ``\\u202e``).

This is the one package that brings ``effectagent``, ``capabilities`` and ``sandbox`` together
for a person at a terminal. Its names are imported when first used: ``effectagent --help``
loads neither the engine nor a provider.
"""

import typing as _typing
from collections.abc import Sequence as _Sequence

if _typing.TYPE_CHECKING:
    from ._config import Config as Config
    from ._config import ConfigError as ConfigError
    from ._config import load_config as load_config
    from .render import Timeline as Timeline

__all__ = ["Config", "ConfigError", "Timeline", "load_config", "main"]


if not _typing.TYPE_CHECKING:  # hidden from type checkers: they see the typed imports above

    def __getattr__(name: str) -> object:
        if name in ("Config", "ConfigError", "load_config"):
            from . import _config

            return getattr(_config, name)
        if name == "Timeline":
            from .render import Timeline

            return Timeline
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: _Sequence[str] | None = None) -> int:
    """The ``effectagent`` command; returns its exit status. The arguments are read first (a
    light module: ``--help`` and ``--version`` answer at once); the models, sandbox and tools
    are imported only when a command runs — for ``chat`` on a terminal, once its input line is
    up and taking input."""
    from ._args import EXIT_INTERRUPTED, parse

    args = parse(argv)
    early = None
    if args.command == "chat":
        import os

        from ._early import line_editor

        early = line_editor(args.state_dir, os.environ)
    try:
        from ._main import execute
    except BaseException as exc:
        if early is not None and early[0] is not None:
            early[0].close()  # the terminal is given back as it was
        if not isinstance(exc, KeyboardInterrupt):
            raise
        # Ctrl-C while the engine is imported (a second or so): said, as later, not a traceback.
        import sys

        try:
            sys.stderr.write("effectagent: interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_INTERRUPTED
    return execute(args) if early is None else execute(args, early=early)

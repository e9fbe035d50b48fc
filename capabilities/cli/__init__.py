"""The ``effectagent`` command (``python -m capabilities.cli``) and its reusable pieces.

* ``effectagent chat`` — an interactive session with an agent; ``effectagent run "prompt"`` — one
  run, its exit status saying how it ended; ``effectagent sessions`` — the saved sessions.
  ``effectagent --help`` has the options, the config file and the exit statuses.
* :func:`load_config` — the command's TOML configuration, validated strictly (a
  :class:`ConfigError` names the file and the key); :class:`Config` is what it holds.
* :mod:`capabilities.cli.render` — :class:`~capabilities.cli.render.Timeline`, a run's events as a
  timeline on a text stream (what ``effectagent chat`` shows; ``make demo`` uses it too), with
  every character a terminal would obey or hide escaped (``\\x1b``, ``\\u202e``).

This is the one package that brings ``effectagent``, ``capabilities`` and ``sandbox`` together
for a person at a terminal.
"""

from collections.abc import Sequence as _Sequence

from ._config import Config as Config
from ._config import ConfigError as ConfigError
from ._config import load_config as load_config
from .render import Timeline as Timeline

__all__ = ["Config", "ConfigError", "Timeline", "load_config", "main"]


def main(argv: _Sequence[str] | None = None) -> int:
    """The ``effectagent`` command; returns its exit status. (The command's modules — models,
    sandbox, tools — are imported here, not when the package is: ``render`` stays light.)"""
    from ._main import main as run

    return run(argv)

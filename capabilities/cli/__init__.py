"""The ``effectagent`` command and its reusable pieces.

* :mod:`capabilities.cli.render` — :class:`~capabilities.cli.render.Timeline`, a run's events as a
  timeline on a text stream (what ``effectagent chat`` shows; ``make demo`` uses it too).
"""

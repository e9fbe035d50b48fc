"""Typing cases: modules that mypy checks (``tests/typing/test_types.py``), never imported.

Each line mypy must reject ends with ``# E: <part of the error>``; every other line must pass, and
``assert_type`` pins what mypy infers. ``make typecheck`` skips this package (``exclude`` in
pyproject.toml): its errors are on purpose.
"""

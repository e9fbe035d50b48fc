"""``python -m capabilities.cli``: the ``effectagent`` command."""

if __name__ == "__main__":
    from capabilities.cli import main

    raise SystemExit(main())

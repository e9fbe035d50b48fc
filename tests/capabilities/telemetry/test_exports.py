"""Importing ``capabilities.telemetry`` without the OpenTelemetry API says what to install (its
public surface is checked with the other capability packages in ``tests/capabilities``)."""

from __future__ import annotations

import subprocess
import sys


def test_without_the_opentelemetry_api_the_import_says_what_to_install() -> None:
    program = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "try:\n"
        "    import capabilities.telemetry\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    ).stdout
    assert "pip install 'effectagent[telemetry]'" in shown

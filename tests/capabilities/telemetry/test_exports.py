"""The public surface of ``capabilities.telemetry``: complete, documented, nothing leaking (the
checks ``tests/capabilities/test_exports.py`` makes for the other capability packages)."""

from __future__ import annotations

import subprocess
import sys

from tests.capabilities import test_exports as exports


def test_every_name_is_unique_importable_and_documented() -> None:
    exports.test_every_name_is_unique_importable_and_documented("capabilities.telemetry")


def test_no_public_attribute_is_left_out_of_all() -> None:
    exports.test_no_public_attribute_is_left_out_of_all("capabilities.telemetry")


def test_exports_are_our_own() -> None:
    exports.test_exports_are_our_own("capabilities.telemetry")


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

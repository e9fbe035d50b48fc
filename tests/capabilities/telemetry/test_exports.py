"""The public surface of ``capabilities.telemetry``: complete, documented, nothing leaking (the
checks ``tests/capabilities/test_exports.py`` makes for the other capability packages)."""

from __future__ import annotations

from tests.capabilities import test_exports as exports


def test_every_name_is_unique_importable_and_documented() -> None:
    exports.test_every_name_is_unique_importable_and_documented("capabilities.telemetry")


def test_no_public_attribute_is_left_out_of_all() -> None:
    exports.test_no_public_attribute_is_left_out_of_all("capabilities.telemetry")


def test_exports_are_our_own() -> None:
    exports.test_exports_are_our_own("capabilities.telemetry")

"""The public surface of ``capabilities.mcp``: complete, documented, nothing leaking — the checks
``tests/capabilities/test_exports.py`` makes for the other capability packages."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.capabilities import test_exports as checks

PACKAGE = "capabilities.mcp"


@pytest.mark.parametrize(
    "check",
    [
        checks.test_every_name_is_unique_importable_and_documented,
        checks.test_no_public_attribute_is_left_out_of_all,
        checks.test_exports_are_our_own,
    ],
)
def test_the_mcp_package_passes_the_export_checks(check: Callable[[str], None]) -> None:
    check(PACKAGE)

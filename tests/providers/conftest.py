"""Fixtures of the provider tests: a clean environment, the loopback replay server, the adapters.

No test reaches the network or holds a real key: every adapter is pointed at the replay server
(127.0.0.1) and given a made-up key.
"""

from __future__ import annotations

import pytest
import trio

from .replay import ReplayServer, start_server
from .targets import TARGETS, Target

#: A made-up key; the secrets tests check it never shows.
KEY = "sk-test-canary-0123456789abcdef"

_ENVIRONMENT = (
    "OPENAI_API_KEY",
    "OPENAI_ADMIN_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "OPENAI_LOG",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_LOG",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_ENTERPRISE",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_GENAI_API_VERSION",
    "GOOGLE_GENAI_HTTP_CLIENT",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_APPLICATION_CREDENTIALS",
)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key, base URL or SDK setting of the machine running the tests leaks in."""
    for name in _ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def server(nursery: trio.Nursery) -> ReplayServer:
    """The replay server, running in the test's nursery (it stops with the test)."""
    return await start_server(nursery)


@pytest.fixture(params=TARGETS, ids=[t.name for t in TARGETS])
def target(request: pytest.FixtureRequest) -> Target:
    """Each adapter in turn."""
    value: Target = request.param
    return value

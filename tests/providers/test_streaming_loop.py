"""The shared streaming loop with a stand-in SDK: what it does with errors the SDK raises."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from effectagent.ai import AiError, ModelNetworkError, ProviderError
from effectagent.providers._openai_chat import ChatCompletionsDecoder
from effectagent.providers._streaming import SdkErrors, stream_parts


class SdkError(Exception):
    """The stand-in SDK's base error."""


class StatusError(SdkError):
    """The stand-in SDK's HTTP status error."""


class ConnectionFailed(SdkError):
    """The stand-in SDK's connection error."""


ERRORS = SdkErrors(
    status=StatusError, connection=(ConnectionFailed,), transport=(OSError,), base=(SdkError,)
)


class Failing(AbstractAsyncContextManager[Any]):
    """A streaming response whose opening raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def __aenter__(self) -> Any:
        raise self.error

    async def __aexit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (SdkError("odd sk-canary"), ProviderError),
        (ConnectionFailed("refused sk-canary"), ModelNetworkError),
    ],
)
async def test_sdk_errors_become_typed_errors_with_nothing_chained(
    raised: Exception, expected: type
) -> None:
    stream = stream_parts(
        lambda: Failing(raised),
        ChatCompletionsDecoder(),
        provider="P",
        errors=ERRORS,
        secrets=["sk-canary"],
    )
    with pytest.raises(expected) as caught:
        async for _ in stream:
            pass
    error = caught.value
    assert isinstance(error, AiError)
    assert "sk-canary" not in error.message
    assert error.__cause__ is None
    assert error.__context__ is None


async def test_an_error_that_is_not_the_sdks_passes_through() -> None:
    stream = stream_parts(
        lambda: Failing(KeyError("a bug")),
        ChatCompletionsDecoder(),
        provider="P",
        errors=ERRORS,
        secrets=[],
    )
    with pytest.raises(KeyError):
        async for _ in stream:
            pass

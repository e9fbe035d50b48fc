"""The ``[serve]`` table of the command's config file → the service's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from capabilities.cli._config import ConfigError, load_config
from capabilities.cli._serve import serve_settings
from capabilities.serve import Principal, Quota, token_digest

CANARY = "config-token-canary-0b9e8d7c6a5f4e3d"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_principals_tokens_quotas_and_bounds_are_read(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "[serve]\n"
        'listen = "127.0.0.1:0"\n'
        "grace = 2\n"
        "max_body = 1000\n"
        "body_timeout = 5\n"
        "quota = { per_minute = 30, burst = 3 }\n"
        "[serve.principals.ann]\n"
        'token_env = "ANN"\n'
        "[serve.principals.ops]\n"
        f'token_sha256 = "{token_digest("ops-secret")}"\n'
        "operator = true\n"
        'quota = "none"\n',
    )
    load_config(path)  # the command's own reading accepts the table
    settings, listen = serve_settings(path, {"ANN": CANARY})
    assert listen == "127.0.0.1:0"
    assert (settings.grace, settings.max_body, settings.body_timeout) == (2.0, 1000, 5.0)
    assert settings.quota == Quota(per_minute=30.0, burst=3)
    assert settings.quotas == {"ops": None}
    assert settings.tokens.resolve(f"Bearer {CANARY}") == Principal("ann")
    assert settings.tokens.resolve("Bearer ops-secret") == Principal("ops", operator=True)
    assert settings.tokens.resolve(None) is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[serve]\nport = 1\n", "unknown key 'port' in [serve]"),
        ("[serve.principals.ann]\noperator = true\n", "needs one of token_env or token_sha256"),
        ('[serve.principals.ann]\ntoken_env = "NOPE"\n', "the variable NOPE is not set"),
        ('[serve.principals.ann]\ntoken_sha256 = "abc"\n', "64 hexadecimal characters"),
        ("[serve]\nquota = { per_minute = 0, burst = 1 }\n", "must be a finite positive number"),
        ("[serve]\ngrace = -1\n", "[serve] grace must be a finite positive number"),
        ("[serve]\ngrace = nan\n", "[serve] grace must be a finite positive number, got nan"),
        ("[serve]\nbody_timeout = 0\n", "[serve] body_timeout must be a finite positive number"),
    ],
)
def test_what_it_cannot_use_is_a_sentence_naming_the_key(
    tmp_path: Path, text: str, said: str
) -> None:
    with pytest.raises(ConfigError, match=None) as raised:
        serve_settings(_file(tmp_path, text), {"ANN": CANARY})
    assert said in str(raised.value)
    assert CANARY not in str(raised.value)


def test_an_anonymous_principal_named_as_a_token_principal_is_refused(tmp_path: Path) -> None:
    """``anonymous = "ops"`` beside an operator ``ops`` was accepted: requests without a token
    acted as ops (owner of ops's conversations) — a config error naming the key instead."""
    path = _file(
        tmp_path,
        '[serve]\nanonymous = "ops"\n[serve.principals.ops]\ntoken_env = "OPS"\noperator = true\n',
    )
    with pytest.raises(ConfigError) as raised:
        serve_settings(path, {"OPS": CANARY})
    said = str(raised.value)
    assert "anonymous" in said
    assert "'ops'" in said
    assert CANARY not in said

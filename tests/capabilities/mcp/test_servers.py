"""A server's description is checked where it is made, and what it holds for authentication
(``env`` of a subprocess, ``headers`` of HTTP requests) shows neither in a refusal nor in a
repr."""

from __future__ import annotations

from typing import Any

import pytest

from capabilities.mcp import HttpServer, StdioServer
from capabilities.mcp._redact import argument_secrets

CANARY = "canary-7f3e9a1b2c"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: StdioServer("github-mcp", env={"GITHUB_TOKEN": CANARY, "DEBUG": 1}),
            "env\\['DEBUG'\\] must be a str, got int",
        ),
        (
            lambda: HttpServer(
                "https://mcp.example.com/mcp",
                headers={"Authorization": f"Bearer {CANARY}", "X-Timeout": 30},
            ),
            "headers\\['X-Timeout'\\] must be a str, got int",
        ),
        (
            lambda: StdioServer("github-mcp", env={CANARY.encode(): CANARY}),
            "env: each key must be a str, got bytes",
        ),
        (
            lambda: StdioServer("github-mcp", env=[("GITHUB_TOKEN", CANARY)]),
            "env must be a mapping of str to str, got list",
        ),
        (
            lambda: HttpServer("https://mcp.example.com/mcp", headers=f"Bearer {CANARY}"),
            "headers must be a mapping of str to str, got str",
        ),
        (
            lambda: StdioServer("github-mcp", ["--token", CANARY, 5]),
            "args\\[2\\] must be a str, got int",
        ),
        (
            lambda: StdioServer("github-mcp", f"--token={CANARY}"),
            "args must be a sequence of str \\(a one-item tuple for one\\), got str",
        ),
    ],
)
def test_a_bad_env_header_or_argument_is_refused_naming_it_without_its_value(
    make: object, message: str
) -> None:
    """The refusal named the whole mapping with its repr: every token in it with it."""
    with pytest.raises(TypeError, match=f"^{message}$") as caught:
        make()  # type: ignore[operator]
    assert CANARY not in str(caught.value)


def test_neither_env_nor_headers_show_in_a_repr() -> None:
    stdio = StdioServer("github-mcp", env={"GITHUB_TOKEN": CANARY})
    http = HttpServer("https://mcp.example.com/mcp", headers={"Authorization": f"Bearer {CANARY}"})
    assert CANARY not in repr(stdio)
    assert CANARY not in repr(http)
    assert stdio.env == {"GITHUB_TOKEN": CANARY}  # kept, only not shown
    assert "github-mcp" in repr(stdio)


@pytest.mark.parametrize(
    "args",
    [["--token", CANARY], [f"--api-key={CANARY}"], ["serve", CANARY]],
    ids=["option", "option=value", "positional"],
)
def test_no_argument_shows_in_a_repr(args: list[str]) -> None:
    """The repr showed every argument: a token passed as one with it."""
    stdio = StdioServer("github-mcp", args)
    assert CANARY not in repr(stdio)
    assert "args=<2 arguments>" in repr(stdio) or "args=<1 argument>" in repr(stdio)
    assert stdio.args == tuple(args)  # kept, only not shown


async def test_connecting_to_what_is_not_a_server_does_not_echo_it() -> None:
    """A configuration dict passed where a server goes was echoed whole, its env with it."""
    from capabilities.mcp import connect

    config = {"command": "github-mcp", "env": {"GITHUB_TOKEN": CANARY}}
    with pytest.raises(
        TypeError, match=r"^connect: server must be a StdioServer or HttpServer, got dict$"
    ) as caught:
        async with connect(config):  # type: ignore[arg-type]
            pass  # pragma: no cover - refused before
    assert CANARY not in str(caught.value)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        # A token read from a file ends with its newline: h11 refused it later, quoting it.
        ({"Authorization": f"Bearer {CANARY}\n"}, r"headers\['Authorization'\]: the value"),
        ({"Authorization": f"Bearer {CANARY}\r\nX-Injected: 1"}, r"headers\['Authorization'\]"),
        ({"X-Key": f"{CANARY}\x00"}, r"headers\['X-Key'\]: the value"),
        ({"X-Key": f"\x1b[2J{CANARY}"}, r"headers\['X-Key'\]: the value"),
        ({"X-Key": f"{CANARY}é"}, r"headers\['X-Key'\]: the value"),
        ({"X-Key": f" {CANARY}"}, r"headers\['X-Key'\]: the value"),
        ({"X-Bad\n": CANARY}, r"headers: the name 'X-Bad\\n' is not"),
        ({"X Bad": CANARY}, r"headers: the name 'X Bad' is not"),
        ({"": CANARY}, r"headers: the name '' is not"),
    ],
)
def test_a_header_that_http_cannot_carry_is_refused_naming_only_its_key(
    headers: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        HttpServer("https://mcp.example.com/mcp", headers=headers)
    assert CANARY not in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_query_of_a_url_shows_in_no_repr() -> None:
    """An API key in the query string (``?api_key=...``) was shown by the repr."""
    server = HttpServer(f"https://mcp.example.com/mcp?api_key={CANARY}&v=2")
    assert CANARY not in repr(server)
    assert "mcp.example.com/mcp?api_key=***&v=***" in repr(server)
    assert server.url.endswith(CANARY + "&v=2")  # kept, only not shown
    assert server.name == "mcp.example.com"
    bare = HttpServer(f"https://mcp.example.com?api_key={CANARY}")
    assert bare.name == "mcp.example.com"  # was the host and the query: in every message
    assert CANARY not in repr(bare)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://", "must name a host"),
        ("http://:8080/mcp", "must name a host"),
        (f"http://mcp.example.com/mcp?api_key={CANARY}\n", "a line break"),
        (f"http://mcp.example.com/m cp?api_key={CANARY}", "a space"),
        ("http://[::1/mcp", "its host or port cannot be read"),
        ("http://mcp.example.com:99999/mcp", "its host or port cannot be read"),
        # A user and password whose "@host" was left out read as a host and a port.
        (f"http://admin:{CANARY}/mcp", "its host or port cannot be read"),
    ],
)
def test_a_url_that_cannot_be_requested_is_refused_without_echoing_it(
    url: str, message: str
) -> None:
    """A URL with no host, a trailing newline or a bad port was taken, to fail only at the
    first request (or to name the server after a line break); urllib's own refusal quoted the
    port, which could be a password."""
    with pytest.raises(ValueError, match=message) as caught:
        HttpServer(url)
    assert CANARY not in str(caught.value)


@pytest.mark.parametrize(
    "character", ["\x85", "\x9f", "\u2028", "\u2029", "\u00a0", "\u3000"], ids=repr
)
def test_a_url_with_a_unicode_line_break_space_or_control_character_is_refused(
    character: str,
) -> None:
    """Only ASCII's were refused: a C1 control (NEL, U+0085), a line or paragraph separator or
    a no-break space was taken as part of the URL, and shown as it is in its repr and messages,
    where the guide says a URL with a line break, a space or a control character is refused.
    A letter past ASCII is no such character and is taken."""
    with pytest.raises(ValueError, match="must not hold a space, a line break") as caught:
        HttpServer(f"https://mcp.example.com/a{character}{CANARY}")
    assert CANARY not in str(caught.value)
    assert HttpServer("https://mcp.example.com/caf\u00e9").url.endswith("caf\u00e9")


def test_a_url_command_or_argument_no_server_can_take_is_refused_where_it_is_made() -> None:
    """A URL that is not a str failed with an AttributeError (its default name read it first),
    a command that is not a str was a ValueError, and a NUL in the command or an argument was
    taken, to fail only at connect — now a TypeError or a ValueError, naming an argument by its
    place, never its value."""
    number: Any = 5
    with pytest.raises(TypeError, match=r"^url must be a str .*got int$"):
        HttpServer(number)
    with pytest.raises(TypeError, match=r"^command must be a non-empty str, got int$"):
        StdioServer(number)
    with pytest.raises(ValueError, match=r"^command must not hold a NUL character$"):
        StdioServer("/usr/bin/mcp\0server")
    with pytest.raises(ValueError, match=r"^args\[1\] must not hold a NUL character$") as caught:
        StdioServer("mcp-server", ["--token", f"{CANARY}\0"])
    assert CANARY not in str(caught.value)


def test_a_cwd_that_is_not_a_path_is_refused_where_the_server_is_made() -> None:
    """Any value was taken as the working directory, to fail only at connect."""
    with pytest.raises(TypeError, match=r"^cwd must be None, a str or a path .*got int$"):
        StdioServer("mcp-server", cwd=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^cwd must not be empty"):
        StdioServer("mcp-server", cwd="")
    assert StdioServer("mcp-server", cwd="/srv").cwd == "/srv"


def test_limits_that_are_not_mcp_limits_are_refused_where_the_server_is_made() -> None:
    """A dict (or None) was taken as the limits, to fail at connect with an AttributeError."""
    with pytest.raises(TypeError, match=r"^limits must be an McpLimits .*got dict$"):
        StdioServer("mcp-server", limits={"call_timeout": 5})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^limits must be an McpLimits .*got NoneType$"):
        HttpServer("https://mcp.example.com/mcp", limits=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"A=B": CANARY}, r"^env: the name 'A=B' is not an environment variable name"),
        ({"": CANARY}, r"^env: the name '' is not an environment variable name"),
        ({"TOKEN": f"{CANARY}\0"}, r"^env\['TOKEN'\]: the value holds a NUL character"),
    ],
)
def test_an_env_no_process_can_hold_is_refused_naming_only_its_key(
    env: dict[str, str], message: str
) -> None:
    """Such an env was taken, to fail at connect with the OS's words, which name no key
    ("illegal environment variable name") — or, for an empty name, to pass unnoticed."""
    with pytest.raises(ValueError, match=message) as caught:
        StdioServer("mcp-server", env=env)
    assert CANARY not in str(caught.value)


@pytest.mark.parametrize(
    ("args", "secret"),
    [
        (("--api-key", "sk-abcdef123456"), "sk-abcdef123456"),
        (("--token=abcdef12",), "abcdef12"),
        (("-e", "GITHUB_TOKEN=ghp_xxxxxxxx"), "ghp_xxxxxxxx"),
        (("--header", "Authorization: Bearer abcdefgh"), "Bearer abcdefgh"),
        (("mcp-remote", "https://h.example/sse?api_key=zzzzzzzz"), "zzzzzzzz"),
        (("--client-secret", "s3cr3tt"), "s3cr3tt"),
        # named for something about a credential, or not for one: no secret (masking "1000"
        # would garble every message that has the number in it)
        (("--max-tokens", "1000"), None),
        (("--author", "Ada Lovelace"), None),
        (("--auth-mode", "oauth"), None),
        (("--token-file", "/run/secrets/token"), None),
        (("--keyboard", "us"), None),
    ],
)
def test_the_arguments_that_pass_a_credential_are_told_apart(
    args: tuple[str, ...], secret: str | None
) -> None:
    found = tuple(argument_secrets(args).values())
    assert found == ((secret,) if secret is not None else ())


def test_port_zero_is_no_port_a_server_listens_on() -> None:
    """``https://host:0/`` was taken, to fail only at connect ("connection refused")."""
    with pytest.raises(ValueError, match="from 1 to 65535"):
        HttpServer("https://mcp.example.com:0/mcp")
    assert HttpServer("https://mcp.example.com:1/mcp").url.endswith(":1/mcp")

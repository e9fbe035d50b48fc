"""``effectagent run --attach FILE``: the file goes to the model with the prompt (its type read
from its bytes), the session's transcript shows it as ``[image: name, size]``, and a file that
cannot be sent is refused with a sentence before anything opens."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from capabilities.cli import main
from capabilities.cli._attach import said
from effectagent.ai import DEFAULT_MAX_MEDIA_BYTES, MediaError, media_from_path
from effectagent.core import UserInputRecorded
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, run_cli, serve, spawn
from .test_cli import PROMPT, args, end_chat, finish

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(100))


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def test_run_attach_sends_the_image_and_the_transcript_shows_it(
    server: ServerThread, tmp_path: Path
) -> None:
    (tmp_path / "cat.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("bring a coat\n")
    server.script(Reply.sse(ChatWire().text("A cat.")))
    command = args(
        server,
        "run",
        "What is this?",
        "--attach",
        str(tmp_path / "cat.png"),
        "--attach",
        str(tmp_path / "notes.txt"),
        "--media",
        "image,document",
        "--session",
        "pics",
    )
    output, status = finish(spawn(command, cli_env(tmp_path)))
    assert status == 0, output
    (request,) = server.requests()
    content = request.json()["messages"][-1]["content"]
    assert content == [
        {"type": "text", "text": "What is this?"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        },
        {"type": "text", "text": "[document: notes.txt]\nbring a coat\n"},
    ]
    shown = subprocess.run(
        [EFFECTAGENT, "sessions", "show", "pics"],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1:] == [
        "you> What is this?",
        "[image: cat.png, 108 bytes]",
        "[document: notes.txt, 13 bytes]",
        "assistant> A cat.",
    ]


def test_a_model_that_reads_text_only_refuses_the_attachment_and_sends_nothing(
    server: ServerThread, tmp_path: Path
) -> None:
    (tmp_path / "cat.png").write_bytes(PNG)
    command = args(server, "run", "What is this?", "--attach", str(tmp_path / "cat.png"))
    output, status = finish(spawn(command, cli_env(tmp_path)))
    assert status == 1
    assert "does not take image input (it takes text only)" in output
    assert "--media" not in output or "media=" in output
    assert server.requests() == []


@pytest.mark.parametrize(
    ("name", "data", "said_"),
    [
        ("missing.png", None, "--attach {path}: the file 'missing.png' does not exist"),
        ("blob.bin", b"\x00\x01\x02", "--attach {path}: the attachment 'blob.bin' is of no media"),
        ("empty.png", b"", "--attach {path}: the attachment 'empty.png' is empty"),
    ],
)
def test_a_file_that_cannot_be_sent_is_a_usage_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    data: bytes | None,
    said_: str,
) -> None:
    for key, value in cli_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    command = ["run", "Hi", "--model", "openai:gpt-4.1", "--attach", str(path)]
    assert main(command) == 2
    assert said_.format(path=path) in capsys.readouterr().err
    assert not (tmp_path / "state").exists()  # refused before anything opened


@pytest.mark.parametrize("kind", ["a pipe", "a device"])
def test_what_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path: Path, kind: str) -> None:
    """A pipe has no size to check and waits for a writer; a device such as ``/dev/zero`` never
    ends: either is refused at once, in a sentence, before anything opens (status 2)."""
    if kind == "a pipe":
        path = tmp_path / "pipe"
        os.mkfifo(path)  # nobody writes to it: reading it would wait for ever
    else:
        path = Path("/dev/null")
    done = run_cli(
        [EFFECTAGENT, "run", "Hi", "--model", "openai:gpt-4.1", "--attach", str(path)],
        cli_env(tmp_path, OPENAI_API_KEY="sk-not-a-real-key-0123"),
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert (
        f"effectagent: --attach {path}: {path.name!r} is {kind}, not a regular file: attach a file"
        in done.stderr
    )
    assert not (tmp_path / "state").exists()  # refused before anything opened


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_path_is_refused_as_empty_not_as_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """``--attach ""`` (a variable that was not set, say) names the empty path, rather than the
    working directory an empty path would be taken for."""
    for key, value in cli_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    assert main(["run", "Hi", "--model", "openai:gpt-4.1", "--attach", given]) == 2
    err = capsys.readouterr().err
    assert err == "effectagent: --attach needs a FILE, and the path given is empty\n"
    assert not (tmp_path / "state").exists()  # refused before anything opened


def test_an_attachment_one_byte_over_the_limit_says_its_exact_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command says the library's sentence as it is, adding no rounding of its own: one byte
    over 20 MiB read "is 20 MiB, over the limit of 20 MiB"."""
    for key, value in cli_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    path = tmp_path / "big.png"
    with path.open("wb") as file:  # sparse: its size is read before any byte is
        file.truncate(DEFAULT_MAX_MEDIA_BYTES + 1)
    with pytest.raises(MediaError) as refused:
        media_from_path(path)
    command = ["run", "Hi", "--model", "openai:gpt-4.1", "--attach", str(path)]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"effectagent: --attach {path}: {refused.value}\n" == err
    assert "20,971,521 bytes" in err
    assert "is 20 MiB, over the limit of 20 MiB" not in err


def test_a_bad_media_kind_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in cli_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    command = ["run", "Hi", "--model", "openai-compatible:x", "--base-url", "http://127.0.0.1:9"]
    assert main([*command, "--media", "video"]) == 2
    assert "--media takes image, document and audio (comma-separated) or none, got 'video'" in (
        capsys.readouterr().err
    )


def test_an_input_without_media_reads_as_its_text() -> None:
    record = UserInputRecorded(
        conversation_id="c", run_id="r", input_id="i", kind="user", text="Hi", author="a", at=1.0
    )
    assert said(record) == "Hi"


def test_chat_attach_sends_the_file_with_the_next_message(
    server: ServerThread, tmp_path: Path
) -> None:
    (tmp_path / "cat.png").write_bytes(PNG)
    wire = ChatWire()
    server.script(Reply.sse(wire.text("A cat.")), Reply.sse(wire.text("Plain.")))
    child = spawn(args(server, "chat", "--media", "image"), cli_env(tmp_path))
    child.expect(PROMPT)
    child.sendline(f"/attach {tmp_path / 'nope.png'}")
    child.expect_exact("the file 'nope.png' does not exist")
    child.expect(PROMPT)
    child.sendline(f"/attach {tmp_path / 'cat.png'}")
    child.expect_exact("attached [image: cat.png, 108 bytes]: it goes with your next message")
    child.expect(PROMPT)
    child.sendline("What is this?")
    child.expect_exact("A cat.")
    child.expect(PROMPT)
    child.sendline("And now?")  # sent alone: the attachment went with the first
    child.expect_exact("Plain.")
    child.expect(PROMPT)
    end_chat(child)
    first, second = (r.json()["messages"][-1]["content"] for r in server.requests())
    assert [part["type"] for part in first] == ["text", "image_url"]
    assert second == "And now?"


def test_chat_attach_reads_the_path_as_a_shell_would_and_names_itself(
    server: ServerThread, tmp_path: Path
) -> None:
    """``~`` is the home directory, and a path a terminal quoted (one dropped on it) is the
    path; a refusal names ``/attach``, what was typed, not ``--attach``."""
    (tmp_path / "my cat.png").write_bytes(PNG)  # tmp_path is HOME in cli_env
    server.script(Reply.sse(ChatWire().text("A cat.")))
    child = spawn(args(server, "chat", "--media", "image"), cli_env(tmp_path))
    child.expect(PROMPT)
    child.sendline("/attach ~/nope.png")
    child.expect_exact(f"/attach {tmp_path / 'nope.png'}: the file 'nope.png' does not exist")
    child.expect(PROMPT)
    child.sendline("/attach ~/my cat.png")
    child.expect_exact("attached [image: my cat.png, 108 bytes]")
    child.expect(PROMPT)
    child.sendline(f"/attach '{tmp_path / 'my cat.png'}'")
    child.expect_exact("attached [image: my cat.png, 108 bytes]")
    child.expect(PROMPT)
    child.sendline("Two cats?")
    child.expect_exact("A cat.")
    child.expect(PROMPT)
    end_chat(child)
    (request,) = server.requests()
    content = request.json()["messages"][-1]["content"]
    assert [part["type"] for part in content] == ["text", "image_url", "image_url"]

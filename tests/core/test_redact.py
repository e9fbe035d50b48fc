"""Redaction of streamed text (pure, no Trio): a secret split across pieces never shows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from effectagent.core import SecretRedactor
from effectagent.core._redact import StreamRedactor

SECRET = "sk-canary-7f3a9"


def _stream(redactor: object, pieces: list[str]) -> str:
    streamed = StreamRedactor(redactor)  # type: ignore[arg-type]
    shown = [streamed.feed("block", piece) for piece in pieces]
    return "".join(shown) + streamed.end("block")


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@given(before=st.text(max_size=20), after=st.text(max_size=20), cuts=st.lists(st.integers(0, 99)))
def test_a_secret_split_anywhere_never_shows(before: str, after: str, cuts: list[int]) -> None:
    text = before + SECRET + after
    out = _stream(SecretRedactor([SECRET]), _split(text, cuts))
    assert SECRET not in out
    assert "[REDACTED]" in out


@given(text=st.text(max_size=60), cuts=st.lists(st.integers(0, 99)))
def test_with_nothing_to_redact_pieces_pass_unchanged(text: str, cuts: list[int]) -> None:
    pieces = _split(text, cuts)
    streamed = StreamRedactor(SecretRedactor())
    assert [streamed.feed("block", piece) for piece in pieces] == pieces
    assert streamed.end("block") == ""


def test_a_secret_registered_mid_stream_is_redacted_from_then_on() -> None:
    redactor = SecretRedactor()
    streamed = StreamRedactor(redactor)
    assert streamed.feed("block", "before ") == "before "
    redactor.register(SECRET)
    out = streamed.feed("block", f"now {SECRET[:5]}") + streamed.feed("block", f"{SECRET[5:]} end")
    assert SECRET not in out
    assert out.startswith("now ")


class _Upper:
    """A redactor that cannot tell what may become a secret: it holds every piece to the end."""

    active = True

    def redact_text(self, text: str) -> str:
        return text.upper()

    def redact(self, value: object) -> object:
        return value

    def partial_secret_suffix(self, text: str) -> int:
        return len(text)


def test_a_redactor_that_cannot_tell_has_the_stream_hold_everything_to_the_end() -> None:
    streamed = StreamRedactor(_Upper())
    assert [streamed.feed("block", piece) for piece in ["ab", "cd"]] == ["", ""]
    assert streamed.end("block") == "ABCD"

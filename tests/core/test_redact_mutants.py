"""Redaction, as a mutant would break it (pure, no Trio; ``make mutate`` runs these against
``effectagent/core/_redact.py``).

* Streaming: for secrets that repeat their own prefix (``"abcabd"``) and texts where occurrences
  overlap, split at every offset — and one character at a time — the streamed output is exactly
  the whole text redacted: the secret never shows, and no other character is lost or added.
* Tool arguments that do not parse (a model's truncated JSON) holding a JSON-escaped secret:
  every escape JSON has, ``\\u`` in either case and surrogate pairs, redacted through
  :func:`redact_arguments` and :func:`redact_json_text`, the functions the engine uses.
* The minimum secret length and :meth:`SecretRedactor.partial_secret_suffix`'s contract, against
  a brute-force reference.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from effectagent.core import (
    REDACTED,
    SecretRedactor,
    StreamRedactor,
    redact_arguments,
    redact_json_text,
)

SECRET = "sk-canary-7f3a9"


# ---- streaming ------------------------------------------------------------------------------


@st.composite
def repeating_secrets(draw: st.DrawFn) -> str:
    """A secret that starts over inside itself: a unit repeated, part of it again, then a
    character that breaks the repetition (``"abc" + "ab" + "d"``)."""
    unit = draw(st.text(alphabet="abc", min_size=1, max_size=3))
    repeats = draw(st.integers(1, 3))
    again = unit[: draw(st.integers(0, len(unit)))]
    secret = unit * repeats + again + draw(st.sampled_from("dab"))
    if len(secret) < 4:
        secret = unit * (4 // len(unit) + 1) + secret
    return secret


@st.composite
def texts_around(draw: st.DrawFn, secret: str) -> str:
    """Text made of the secret, its prefixes and noise in the same letters, so that occurrences
    and near-occurrences overlap (``"xxabcab" + "d!"``)."""
    pieces = draw(
        st.lists(
            st.one_of(
                st.just(secret),
                st.integers(1, len(secret) - 1).map(lambda n: secret[:n]),
                st.integers(1, len(secret) - 1).map(lambda n: secret[n:]),
                st.text(alphabet="abcdx!", max_size=4),
            ),
            max_size=6,
        )
    )
    return "".join(pieces)


@st.composite
def secrets_and_texts(draw: st.DrawFn) -> tuple[str, str]:
    secret = draw(repeating_secrets())
    return secret, draw(texts_around(secret))


def _stream(redactor: SecretRedactor, pieces: list[str], block: object = "block") -> str:
    streamed = StreamRedactor(redactor)
    return "".join(streamed.feed(block, piece) for piece in pieces) + streamed.end(block)


@given(secrets_and_texts())
@example(("abcabd", "xxabcabd!"))
@example(("aaab", "aaaab"))
@example(("abab", "ababababa"))
def test_a_secret_repeating_its_prefix_never_shows_wherever_the_stream_is_cut(
    case: tuple[str, str],
) -> None:
    secret, text = case
    redactor = SecretRedactor([secret])
    whole = redactor.redact_text(text)
    assert secret not in whole
    for cut in range(len(text) + 1):
        assert _stream(redactor, [text[:cut], text[cut:]]) == whole, cut
    assert _stream(redactor, list(text)) == whole


def test_the_partial_match_that_caused_a_leak_is_held_whole() -> None:
    # "xxabcab" ends with "abcab", the longest start of "abcabd" it ends with; holding back only
    # "ab" (a shorter start) would let "abc" out, and "ab" + "d!" would no longer spell a secret.
    redactor = SecretRedactor(["abcabd"])
    streamed = StreamRedactor(redactor)
    assert streamed.feed("block", "xxabcab") == "xx"
    assert streamed.feed("block", "d!") == f"{REDACTED}!"
    assert streamed.end("block") == ""


@given(
    first=texts_around("abcabd"),
    second=texts_around("abcabd"),
    cuts=st.lists(st.integers(0, 40), max_size=6),
)
def test_interleaved_blocks_are_held_back_apart(first: str, second: str, cuts: list[int]) -> None:
    redactor = SecretRedactor(["abcabd"])
    streamed = StreamRedactor(redactor)
    shown: dict[str, list[str]] = {"one": [], "two": []}
    points = sorted({0, *cuts})
    for a, b in zip(points, [*points[1:], None], strict=True):
        shown["one"].append(streamed.feed("one", first[a:b]))
        shown["two"].append(streamed.feed("two", second[a:b]))
    assert "".join(shown["one"]) + streamed.end("one") == redactor.redact_text(first)
    assert "".join(shown["two"]) + streamed.end("two") == redactor.redact_text(second)


def test_the_end_of_a_block_is_redacted_once_more_and_forgotten() -> None:
    redactor = SecretRedactor()
    streamed = StreamRedactor(redactor)
    redactor.register(SECRET)
    assert streamed.feed("block", "see sk-canary") == "see "
    redactor.register("sk-canary")  # now a secret whole: what was held is redacted at the end
    assert streamed.end("block") == REDACTED
    assert streamed.end("block") == ""
    assert streamed.end("other") == ""
    assert streamed.feed("one", "a sk-can") == "a "
    assert streamed.end("two") == ""  # another block holding something changes nothing here
    assert streamed.end("one") == "sk-can"


def test_a_block_that_held_nothing_ends_with_nothing() -> None:
    class _Marking:
        """Marks every text it redacts, so a call on nothing would show."""

        active = True

        def redact_text(self, text: str) -> str:
            return f"<{text}>"

        def redact(self, value: object) -> object:
            return value

        def partial_secret_suffix(self, text: str) -> int:
            return 0

    streamed = StreamRedactor(_Marking())
    assert streamed.feed("block", "ab") == "<ab>"
    assert streamed.end("block") == ""


def test_a_redactor_gone_inactive_still_lets_what_it_held_out() -> None:
    class _Switch:
        """Active only while it holds back: what it held must still come out at the end."""

        active = True

        def redact_text(self, text: str) -> str:
            return text

        def redact(self, value: object) -> object:
            return value

        def partial_secret_suffix(self, text: str) -> int:
            return 1 if self.active else 0

    redactor = _Switch()
    streamed = StreamRedactor(redactor)
    assert streamed.feed("block", "abc") == "ab"
    redactor.active = False
    assert streamed.feed("block", "d") == "cd"  # the held "c" is not dropped
    assert streamed.end("block") == ""


# ---- the secret and the partial match ------------------------------------------------------


def test_a_secret_shorter_than_four_characters_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^a secret to redact must be a string of at least 4 "):
        SecretRedactor(["abc"])
    with pytest.raises(ValueError, match="at least 4 characters"):
        SecretRedactor().register(1234)  # type: ignore[arg-type]
    redactor = SecretRedactor(["abcd"])
    assert redactor.active
    assert redactor.redact_text("xabcdx") == f"x{REDACTED}x"
    assert not SecretRedactor().active


def _reference_suffix(secrets: list[str], text: str) -> int:
    needles = {*secrets, *(json.dumps(s)[1:-1] for s in secrets)}
    return max(
        (n for needle in needles for n in range(len(needle)) if text.endswith(needle[:n])),
        default=0,
    )


@given(
    secrets=st.lists(repeating_secrets(), min_size=1, max_size=3),
    text=st.text(alphabet="abcd", max_size=12),
)
@example(secrets=["abcabd"], text="xxabcab")
@example(secrets=["abcd"], text="xxabcd")  # the whole secret is not a start of one
@example(secrets=["abcd", "bcdbcdx"], text="abc")
def test_partial_secret_suffix_is_the_longest_end_that_starts_a_secret(
    secrets: list[str], text: str
) -> None:
    redactor = SecretRedactor(secrets)
    held = redactor.partial_secret_suffix(text)
    assert held == _reference_suffix(secrets, text)
    assert 0 <= held <= len(text)


def test_partial_secret_suffix_counts_the_escaped_spelling_too() -> None:
    redactor = SecretRedactor(['say "hi"'])  # escaped: say \"hi\"
    assert redactor.partial_secret_suffix('x say \\"h') == len('say \\"h')
    assert redactor.partial_secret_suffix("") == 0


def test_a_secret_holding_another_is_replaced_whole() -> None:
    # The shorter one sorts after the longer one by length, before it by letters.
    redactor = SecretRedactor(["bcde", "abcdef"])
    assert redactor.redact_text("<abcdef>") == f"<{REDACTED}>"
    redactor = SecretRedactor(["abcdef", "bcde"])
    assert redactor.redact_text("<abcdef> <bcde>") == f"<{REDACTED}> <{REDACTED}>"


def test_a_secret_is_redacted_in_its_json_escaped_spelling_whole() -> None:
    redactor = SecretRedactor(['say "hi"'])
    assert redactor.redact_text('{"q": "say \\"hi\\""}') == '{"q": "' + REDACTED + '"}'
    assert redactor.redact_text('say "hi"') == REDACTED


def _reference_redact(value: Any, secret: str) -> Any:
    if isinstance(value, str):
        return value.replace(secret, REDACTED)
    if isinstance(value, dict):
        return {
            _reference_redact(k, secret): _reference_redact(v, secret) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_reference_redact(v, secret) for v in value]
    return value


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(alphabet="sk-canary-7f3a9x", max_size=20)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(alphabet="sk-canary-7f3a9x", max_size=20), inner, max_size=4),
    ),
    max_leaves=12,
)


@given(value=_JSON)
@example(value={SECRET: [SECRET, (1, f"a{SECRET}b")], "n": None})
def test_redact_walks_keys_and_values_of_every_container(value: Any) -> None:
    assert SecretRedactor([SECRET]).redact(value) == _reference_redact(value, SECRET)


def test_redact_keeps_what_is_not_text_and_passes_through_without_secrets() -> None:
    value = {"k": [SECRET]}
    assert SecretRedactor().redact(value) is value
    redactor = SecretRedactor([SECRET])
    assert redactor.redact(7) == 7
    assert redactor.redact(SECRET) == REDACTED
    assert redactor.redact({1: SECRET}) == {1: REDACTED}  # a key that is not text stays
    assert redactor.redact((SECRET, {"a": (SECRET,)})) == [REDACTED, {"a": [REDACTED]}]


# ---- tool arguments as text: escaped, truncated ---------------------------------------------

# Each JSON escape, the character it stands for, and a secret holding that character.
_ESCAPES = [
    ('\\"', '"'),
    ("\\\\", "\\"),
    ("\\/", "/"),
    ("\\b", "\b"),
    ("\\f", "\f"),
    ("\\n", "\n"),
    ("\\r", "\r"),
    ("\\t", "\t"),
    ("\\u0065", "e"),
    ("\\u00E9", "é"),
    ("\\u00e9", "é"),
]


@pytest.mark.parametrize(("escape", "char"), _ESCAPES)
def test_a_truncated_argument_spelling_a_secret_with_an_escape_is_redacted(
    escape: str, char: str
) -> None:
    secret = f"tok{char}en-42"
    redactor = SecretRedactor([secret])
    # The first letter spelled as a \u escape too: no registered spelling matches the raw text.
    raw = '{"path": "/tmp", "key": "\\u0074ok' + escape + 'en-42", "more'
    assert json.dumps(secret)[1:-1] not in raw
    value, text = redact_arguments(raw, redactor)
    assert value == text == '{"path": "/tmp", "key": "' + REDACTED + '", "more'
    assert redact_json_text(raw, redactor) == text


def test_a_surrogate_pair_spelling_is_joined_before_matching() -> None:
    secret = "key-\U0001f600-1"
    redactor = SecretRedactor([secret])
    raw = '["key-\\ud83d\\ude00-1", "tail'
    assert redact_arguments(raw, redactor) == (f'["{REDACTED}", "tail',) * 2


def test_a_lone_surrogate_does_not_stop_an_escaped_secret_being_found() -> None:
    redactor = SecretRedactor([SECRET])
    raw = '["\\ud800", "sk-canary-7f3\\u0061' + '9", '
    shown, text = redact_arguments(raw, redactor)
    assert shown == text == f'["\ud800", "{REDACTED}", '


def test_a_truncated_argument_with_nothing_escaped_to_redact_keeps_its_spelling() -> None:
    redactor = SecretRedactor([SECRET])
    # The secret is there as written, beside escapes: the decoded text, redacted, is kept.
    raw = '{"a": "line\\none \\u0041", "b": "sk-canary-7f3a9'
    assert redact_arguments(raw, redactor) == ('{"a": "line\none A", "b": "' + REDACTED,) * 2
    # Nothing to redact once decoded: the text keeps its spelling, escapes and all.
    plain = '{"a": "line\\none", "b'
    assert redact_json_text(plain, redactor) == plain
    assert redact_json_text("no escapes sk-canary-7f3a9", redactor) == f"no escapes {REDACTED}"


def test_an_escape_json_does_not_have_is_left_alone() -> None:
    redactor = SecretRedactor(["tok\\xen"])
    # "\x" is no JSON escape: the text is matched as written.
    assert redact_json_text('["tok\\xen", "', redactor) == '["tok\\xen", "'.replace(
        "tok\\xen", REDACTED
    )
    assert redact_json_text('["\\u00g1 tok\\xen', redactor) == f'["\\u00g1 {REDACTED}'


def test_arguments_that_parse_are_redacted_as_the_decoded_value() -> None:
    redactor = SecretRedactor([SECRET])
    raw = '{"k": "sk-canary-7f3\\u00619", "l": [1, "sk-canary-7f3a9"], "sk-canary-7f3a9": true}'
    shown, text = redact_arguments(raw, redactor)
    assert shown == {"k": REDACTED, "l": [1, REDACTED], REDACTED: True}
    assert text == f'{{"k":"{REDACTED}","l":[1,"{REDACTED}"],"{REDACTED}":true}}'
    assert redact_arguments('"just text"', redactor) == ("just text", '"just text"')

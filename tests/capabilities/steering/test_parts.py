"""Input with media as a journal row keeps it: for every input, the row's text and parts build
it again exactly (text parts may hold the blank lines that join them), the bytes by digest; a
row whose bytes are gone, or whose parts do not fit its text, is refused, never guessed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.steering._parts import content_of, digests_of, stored
from effectagent.ai import ImagePart, MediaError, MediaPart, TextContent

PNG = b"\x89PNG\r\n\x1a\n"
IMAGES = st.builds(
    lambda tail, name: ImagePart(PNG + tail, name=name),
    st.binary(min_size=1, max_size=16),
    st.sampled_from(["cat.png", "", "a b.png"]),
)
URLS = st.builds(
    lambda n: ImagePart(url=f"https://example.com/{n}.png", media_type="image/png"),
    st.integers(0, 9),
)
TEXTS = st.builds(TextContent, st.text(alphabet="ab \n\t\u00e9", max_size=12))
CONTENTS = st.lists(st.one_of(TEXTS, IMAGES, URLS), min_size=1, max_size=6).map(tuple)


@given(CONTENTS)
def test_a_row_builds_the_input_again_exactly(content: tuple[TextContent | MediaPart, ...]) -> None:
    text, parts, blobs = stored(content, str)
    assert text == "\n\n".join(p.text for p in content if isinstance(p, TextContent))
    assert set(digests_of(parts)) == set(blobs)
    assert content_of(text, parts, blobs) == content
    assert all(p.url or p.digest in blobs for p in content if isinstance(p, MediaPart))


def test_names_and_urls_are_redacted_at_rest_and_bytes_never_in_the_parts() -> None:
    image = ImagePart(PNG + b"canary", name="secret.png")
    link = ImagePart(url="https://example.com/secret.png", media_type="image/png")
    _, parts, blobs = stored((image, link), lambda t: t.replace("secret", "[REDACTED]"))
    assert "secret" not in parts
    assert "canary" not in parts
    assert blobs == {image.digest: image.data}


def test_a_row_whose_bytes_are_gone_or_whose_parts_do_not_fit_is_refused() -> None:
    image = ImagePart(PNG + b"x", name="cat.png")
    text, parts, _ = stored((TextContent("look"), image), str)
    with pytest.raises(MediaError):
        content_of(text, parts, {})
    with pytest.raises(ValueError, match="do not fit"):
        content_of("", parts, {image.digest: image.data})

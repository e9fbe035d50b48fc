"""Media in prompts: images, documents and audio, as typed content parts.

A part holds its bytes (or, for an image or a document, an ``http(s)`` URL the provider fetches),
its media type, and an optional name. The media type of bytes is sniffed from their first bytes;
a part is refused at construction, with a sentence, when its data is empty, its type unknown or
not one its kind takes, a declared type disagrees with the bytes, a URL is not ``http(s)``, or the
data is larger than the bound (:data:`DEFAULT_MAX_MEDIA_BYTES` unless ``max_bytes``, a positive
int, says otherwise).

Each part with bytes is addressed by its SHA-256 ``digest``: the canonical records hold
:meth:`MediaPart.reference` (kind, media type, name, size, digest — never the bytes), the bytes are
kept once per digest beside the log, and a record read back stands for a :class:`MediaRef` until
its bytes are found again (:meth:`MediaRef.with_data`). A part's ``repr`` and ``describe`` show
its kind, name, size and digest, never its bytes.
"""

from __future__ import annotations

import hashlib
import stat
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, ClassVar, Literal, TypeAlias, Union, get_args, get_origin
from urllib.parse import urlsplit

import attrs

from ._checks import shown as _value_shown
from ._errors import InvalidModelRequest, format_bytes

__all__ = [
    "DEFAULT_MAX_MEDIA_BYTES",
    "MEDIA_TYPES",
    "AudioPart",
    "DocumentPart",
    "ImagePart",
    "MediaError",
    "MediaKind",
    "MediaNotSupported",
    "MediaPart",
    "MediaRef",
    "describe_media",
    "media_as_text",
    "media_classes",
    "media_from_bytes",
    "media_from_path",
    "sniff_media_type",
    "split_media",
]

#: The kinds of media a prompt may hold.
MediaKind: TypeAlias = Literal["image", "document", "audio"]

#: The largest part (in bytes) made unless a constructor's ``max_bytes`` says otherwise: 20 MiB,
#: the largest image OpenAI takes.
DEFAULT_MAX_MEDIA_BYTES = 20 * 1024 * 1024

#: The longest name a part may have, in characters: a name is a label (a file's name, a
#: document's title), sent with every request the part is in and shown in every event and log
#: line that shows the part.
_MAX_NAME_CHARS = 1024

#: The media types each kind takes.
MEDIA_TYPES: Mapping[MediaKind, frozenset[str]] = {
    "image": frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"}),
    "document": frozenset(
        {"application/pdf", "text/plain", "text/markdown", "text/csv", "text/html"}
    ),
    "audio": frozenset({"audio/wav", "audio/mpeg", "audio/flac", "audio/ogg"}),
}

_KIND_OF: dict[str, MediaKind] = {
    media_type: kind for kind, types in MEDIA_TYPES.items() for media_type in types
}

#: Other spellings of the media types above.
_ALIASES = {
    "image/jpg": "image/jpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/mp3": "audio/mpeg",
    "audio/x-flac": "audio/flac",
}

#: What a file's suffix names, for text (which has no magic bytes).
_TEXT_SUFFIXES = {
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".html": "text/html",
    ".htm": "text/html",
}


class MediaError(ValueError):
    """A media part that cannot be made, or used: the message is a sentence to show."""


@attrs.frozen
class MediaNotSupported(InvalidModelRequest):
    """The model cannot take a media part of the request (its kind, or its size): refused before
    anything was sent. A ``FallbackModel`` asks its next member."""


def sniff_media_type(data: bytes) -> str | None:
    """The media type ``data`` starts like, or None when unknown. Text (valid UTF-8 without
    control characters other than tab and line breaks) is ``text/plain``. Pure."""
    head = data[:16]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "audio/mpeg"
    return "text/plain" if _is_text(data) else None


def _is_text(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any(ord(c) < 32 and c not in "\t\n\r\f" for c in text[:65536])


def _normal(media_type: str) -> str:
    media_type = media_type.split(";", 1)[0].strip().lower()
    return _ALIASES.get(media_type, media_type)


def _checked_type(
    kind: MediaKind | None, data: bytes, declared: str | None, shown: str
) -> tuple[MediaKind, str]:
    """(kind, media type) of ``data``, or the MediaError saying why not."""
    sniffed = sniff_media_type(data)
    if declared is not None:
        declared = _normal(declared)
        if declared not in _KIND_OF:
            raise MediaError(f"{shown} has the media type {declared!r}, which no kind takes")
    if sniffed is None:
        raise MediaError(
            f"{shown} is of no media type this library knows (PNG, JPEG, GIF, WebP, PDF, "
            "UTF-8 text, WAV, MP3, FLAC, Ogg)"
        )
    media_type = sniffed
    if declared is not None and declared != sniffed:
        if sniffed == "text/plain" and declared.startswith("text/"):
            media_type = declared
        else:
            raise MediaError(f"{shown} was declared {declared}, but its bytes are {sniffed}")
    found = _KIND_OF[media_type]
    if kind is not None and found != kind:
        raise MediaError(f"{shown} is {media_type}, not {_article(kind)}")
    return found, media_type


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _check_options(media_type: object, max_bytes: object) -> None:
    """``TypeError`` (or, for a number no size fits under, ``MediaError``) naming the option
    given wrong: ``max_bytes`` a positive int (not a bool), ``media_type`` a str or None."""
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool):
        raise TypeError(
            f"a media part's max_bytes must be a positive int, got {_value_shown(max_bytes)}"
        )
    if max_bytes < 1:
        raise MediaError(f"a media part's max_bytes must be a positive int, got {max_bytes}")
    if media_type is not None and not isinstance(media_type, str):
        raise TypeError(
            f"a media part's media_type must be a str or None, got {_value_shown(media_type)}"
        )


#: The Unicode categories a name may not hold: control characters, and the line and paragraph
#: separators (U+2028, U+2029).
_UNPRINTABLE = frozenset({"Cc", "Zl", "Zp"})


def _check_name(kind: str, name: str) -> None:
    """MediaError for a name no label may be: one over :data:`_MAX_NAME_CHARS`, or one
    holding a control character or a line or paragraph separator — the name is written into the
    transcript line the model reads (``[document: notes.txt, 5 bytes]``, a text document's
    header), and a line break in it would start a line of the caller's choosing there, and in
    every event and log line."""
    if len(name) > _MAX_NAME_CHARS:
        raise MediaError(
            f"the {kind}'s name is {len(name):,} characters long, over the limit of "
            f"{_MAX_NAME_CHARS:,}"
        )
    if any(unicodedata.category(char) in _UNPRINTABLE for char in name):
        raise MediaError(
            f"the {kind}'s name {name!r} holds a line break or another control character"
        )


def _file_label(name: str) -> str:
    """A file's name as a part's name: each character a name may not hold replaced by U+FFFD
    (a file may be called anything but ``/`` and NUL), cut to :data:`_MAX_NAME_CHARS`."""
    cleaned = "".join(
        "\ufffd" if unicodedata.category(char) in _UNPRINTABLE else char for char in name
    )
    return cleaned[:_MAX_NAME_CHARS]


def _check_size(size: int, max_bytes: int, shown: str) -> None:
    if size == 0:
        raise MediaError(f"{shown} is empty")
    if size > max_bytes:
        raise MediaError(
            f"{shown} is {format_bytes(size, apart_from=max_bytes)}, over the limit of "
            f"{format_bytes(max_bytes, apart_from=size)}"
        )


@attrs.frozen(slots=True, init=False, repr=False)
class MediaPart:
    """An image, document or audio clip in a prompt. Make one with a subclass
    (:class:`ImagePart`, :class:`DocumentPart`, :class:`AudioPart`) or
    :func:`media_from_bytes` / :func:`media_from_path` (which pick the kind from the bytes)."""

    kind: ClassVar[MediaKind]
    #: Whether a part of this kind may be a URL the provider fetches.
    takes_url: ClassVar[bool] = False

    media_type: str
    data: bytes
    url: str
    name: str
    size: int
    digest: str

    def __init__(
        self,
        data: bytes | None = None,
        *,
        url: str | None = None,
        media_type: str | None = None,
        name: str = "",
        max_bytes: int = DEFAULT_MAX_MEDIA_BYTES,
    ) -> None:
        if type(self) is MediaPart:
            raise TypeError(
                "make an ImagePart, DocumentPart or AudioPart (or use media_from_bytes)"
            )
        _check_options(media_type, max_bytes)
        kind = self.kind
        if not isinstance(name, str):
            raise TypeError(f"a media part's name must be a str, got {type(name).__name__}")
        _check_name(kind, name)
        shown = f"the {kind} {name!r}" if name else f"the {kind}"
        if (data is None) == (url is None):
            raise MediaError(f"{shown} needs either its bytes or a URL, not both or neither")
        if url is not None:
            if not self.takes_url:
                raise MediaError(f"{_article(kind)} part is sent as bytes, not a URL")
            given: object = url  # checked at run time too: not every caller runs mypy
            if not isinstance(given, str) or not url.lower().startswith(("https://", "http://")):
                raise MediaError(f"{shown} has a URL that is not http(s)")
            if len(url) > 8192:
                raise MediaError(f"{shown} has a URL longer than 8192 characters")
            if not _has_host(url):
                raise MediaError(
                    f"{shown} has a URL without a host, with a port that is not a number up to "
                    "65535, or with a control character"
                )
            declared = _normal(media_type) if media_type is not None else _guess_from_url(url)
            if declared is None:
                raise MediaError(f"{shown} at a URL needs its media_type")
            if _KIND_OF.get(declared) != kind:
                raise MediaError(f"{shown} has the media type {declared!r}, not one {kind}s take")
            _set(self, declared, b"", url, name, 0, "")
            return
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"{shown}'s data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        _check_size(len(data), max_bytes, shown)
        _, found = _checked_type(kind, data, media_type, shown)
        _set(self, found, data, "", name, len(data), _digest(data))

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        *,
        media_type: str | None = None,
        name: str | None = None,
        max_bytes: int = DEFAULT_MAX_MEDIA_BYTES,
    ) -> MediaPart:
        """The part a file holds, named after the file unless ``name`` is given; its media type
        is sniffed (a text file's from its suffix). Reads the file: call it off the event loop
        for large files. Raises MediaError (the file missing, empty, too large, not a regular
        file — a pipe or a device is refused before it is read — or not this kind)."""
        data, declared, shown = _read(path, media_type, max_bytes)
        named = shown if name is None else name
        return cls(data, media_type=declared, name=named, max_bytes=max_bytes)

    @property
    def text(self) -> str:
        """The part as text reads it: its description (code that joins a message's ``.text``
        reads ``[image: cat.png, 120 KiB]`` where the image is)."""
        return self.describe()

    @property
    def is_url(self) -> bool:
        """Whether the provider fetches the part from :attr:`url` (no bytes here)."""
        return bool(self.url)

    def reference(self) -> dict[str, Any]:
        """What the canonical records hold of the part: never its bytes."""
        ref: dict[str, Any] = {"type": self.kind, "media_type": self.media_type}
        if self.name:
            ref["name"] = self.name
        if self.url:
            ref["url"] = self.url
        else:
            ref["size"] = self.size
            ref["digest"] = self.digest
        return ref

    def describe(self) -> str:
        """How a person reads it in a transcript: ``[image: cat.png, 120 KiB]``."""
        return describe_media(self.kind, self.name, self.size, self.url)

    def label(self) -> str:
        """How events, spans and logs show it: ``[image: cat.png, 120 KiB, image/png,
        sha256:3a7bd3e2360a]`` — kind, name, size, media type and the digest's first 12 hex
        digits (or the URL); never the bytes."""
        if self.url:
            return f"[{self.kind}: {self.name or self.url}, {self.media_type}, {self.url}]"
        name = self.name or "unnamed"
        size = format_bytes(self.size)
        return f"[{self.kind}: {name}, {size}, {self.media_type}, {self.digest[:19]}]"

    def __repr__(self) -> str:
        where = self.url if self.url else f"{format_bytes(self.size)}, {self.digest[:19]}…"
        name = f"{self.name!r}, " if self.name else ""
        return f"{type(self).__name__}({name}{self.media_type}, {where})"


def describe_media(kind: str, name: str, size: int, url: str = "") -> str:
    """``[image: cat.png, 120 KiB]`` — the transcript line of a part or a reference."""
    label = name or url or "unnamed"
    return f"[{kind}: {label}]" if url and not size else f"[{kind}: {label}, {format_bytes(size)}]"


def _set(
    part: MediaPart, media_type: str, data: bytes, url: str, name: str, size: int, digest: str
) -> None:
    setter = object.__setattr__
    setter(part, "media_type", media_type)
    setter(part, "data", data)
    setter(part, "url", url)
    setter(part, "name", name)
    setter(part, "size", size)
    setter(part, "digest", digest)


def _guess_from_url(url: str) -> str | None:
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    for suffix, media_type in {
        ".png": "image/png",
        ".jpg": "image/jpeg",
        ".jpeg": "image/jpeg",
        ".gif": "image/gif",
        ".webp": "image/webp",
        ".pdf": "application/pdf",
    }.items():
        if path.endswith(suffix):
            return media_type
    return None


def _read(
    path: str | Path, media_type: str | None, max_bytes: int
) -> tuple[bytes, str | None, str]:
    _check_options(media_type, max_bytes)
    file = Path(path)
    shown = _file_label(file.name)
    try:
        status = file.stat()
        mode = status.st_mode
        if stat.S_ISREG(mode):
            if status.st_size > max_bytes:  # said before anything is read
                _check_size(status.st_size, max_bytes, f"the file {shown!r}")
            with file.open("rb") as opened:  # bounded: the file may grow after it is looked at
                data = opened.read(max_bytes + 1)
    except OSError as exc:
        raise _unreadable(exc, shown) from None
    if stat.S_ISDIR(mode):
        raise MediaError(f"{shown!r} is a directory, not a file")
    if not stat.S_ISREG(mode):  # a pipe would wait for ever, a device never end
        kind = "a pipe" if stat.S_ISFIFO(mode) else "a device or socket"
        raise MediaError(f"{shown!r} is {kind}, not a regular file")
    if len(data) > max_bytes:  # it grew after its size was looked at (an empty one: below)
        _check_size(len(data), max_bytes, f"the file {shown!r}")
    if media_type is None and sniff_media_type(data) == "text/plain":
        media_type = _TEXT_SUFFIXES.get(file.suffix.lower())
    return data, media_type, shown


def _unreadable(exc: OSError, shown: str) -> MediaError:
    if isinstance(exc, FileNotFoundError):
        return MediaError(f"the file {shown!r} does not exist")
    if isinstance(exc, IsADirectoryError):
        return MediaError(f"{shown!r} is a directory, not a file")
    return MediaError(f"the file {shown!r} could not be read ({exc.strerror})")


@attrs.frozen(slots=True, init=False, repr=False)
class ImagePart(MediaPart):
    """An image: PNG, JPEG, GIF or WebP bytes, or an ``http(s)`` URL."""

    kind: ClassVar[MediaKind] = "image"
    takes_url: ClassVar[bool] = True


@attrs.frozen(slots=True, init=False, repr=False)
class DocumentPart(MediaPart):
    """A document: PDF or plain text (also Markdown, CSV, HTML) bytes, or an ``http(s)`` URL of
    a PDF."""

    kind: ClassVar[MediaKind] = "document"
    takes_url: ClassVar[bool] = True


@attrs.frozen(slots=True, init=False, repr=False)
class AudioPart(MediaPart):
    """Audio: WAV, MP3, FLAC or Ogg bytes."""

    kind: ClassVar[MediaKind] = "audio"


_CLASSES: dict[MediaKind, type[MediaPart]] = {
    "image": ImagePart,
    "document": DocumentPart,
    "audio": AudioPart,
}


def media_from_bytes(
    data: bytes,
    *,
    media_type: str | None = None,
    name: str = "",
    max_bytes: int = DEFAULT_MAX_MEDIA_BYTES,
) -> MediaPart:
    """The image, document or audio part ``data`` is (its kind from its media type)."""
    _check_options(media_type, max_bytes)
    shown = f"the attachment {name!r}" if name else "the attachment"
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{shown}'s data must be bytes, got {type(data).__name__}")
    _check_size(len(data), max_bytes, shown)
    kind, _ = _checked_type(None, bytes(data), media_type, shown)
    return _CLASSES[kind](data, media_type=media_type, name=name, max_bytes=max_bytes)


def media_from_path(
    path: str | Path,
    *,
    media_type: str | None = None,
    name: str | None = None,
    max_bytes: int = DEFAULT_MAX_MEDIA_BYTES,
) -> MediaPart:
    """The image, document or audio part a file holds (see :meth:`MediaPart.from_path`)."""
    data, declared, shown = _read(path, media_type, max_bytes)
    return media_from_bytes(
        data, media_type=declared, name=shown if name is None else name, max_bytes=max_bytes
    )


@attrs.frozen(slots=True)
class MediaRef:
    """A media part as the records hold it, its bytes not loaded: ``digest`` names them."""

    kind: MediaKind
    media_type: str
    name: str = ""
    size: int = 0
    digest: str = ""

    @staticmethod
    def of(value: Mapping[str, Any]) -> MediaRef | MediaPart:
        """The reference a record holds (a URL part comes back whole: it has no bytes)."""
        kind = value.get("type")
        media_type = value.get("media_type")
        if kind not in _CLASSES or not isinstance(media_type, str):
            raise MediaError("a recorded media part is damaged (no kind or media type)")
        name = value.get("name", "")
        url = value.get("url")
        if isinstance(url, str):
            return _CLASSES[kind](url=url, media_type=media_type, name=name)
        size, digest = value.get("size"), value.get("digest")
        if type(size) is not int or not isinstance(digest, str):
            raise MediaError("a recorded media part is damaged (no size or digest)")
        return MediaRef(kind, media_type, name if isinstance(name, str) else "", size, digest)

    def with_data(self, data: bytes) -> MediaPart:
        """The part these bytes make; MediaError when they are not the ones recorded."""
        if _digest(data) != self.digest:
            raise MediaError(f"the stored bytes of {self.describe()} do not match its digest")
        part = object.__new__(_CLASSES[self.kind])
        _set(part, self.media_type, data, "", self.name, len(data), self.digest)
        return part

    def describe(self) -> str:
        """``[image: cat.png, 120 KiB]``."""
        return describe_media(self.kind, self.name, self.size)

    def missing(self) -> MediaError:
        """The error of a reference whose bytes are not stored."""
        return MediaError(
            f"the bytes of {self.describe()} ({self.digest[:19]}…) are not stored: "
            "the conversation cannot be sent to the model again with it"
        )


def media_as_text(tp: Any) -> tuple[Any, bool]:
    """(``tp`` with every media part class in it read as ``str``, whether it had one): the type a
    tool's result is checked and described by when it returns media (each part stands in the
    result as its description, the part itself going to the model beside it)."""
    if isinstance(tp, type) and issubclass(tp, MediaPart):
        return str, True
    origin, args = get_origin(tp), get_args(tp)
    if origin is None or not args:
        return tp, False
    mapped = [media_as_text(arg) for arg in args]
    if not any(found for _, found in mapped):
        return tp, False
    new_args = tuple(arg for arg, _ in mapped)
    if origin in (Union, UnionType):
        return Union[new_args], True  # noqa: UP007 - a union built at run time
    return origin[new_args if len(new_args) > 1 else new_args[0]], True


def media_classes(tp: Any) -> tuple[type[MediaPart], ...]:
    """The media part classes a type names anywhere in it (``list[str | ImagePart]``: ImagePart),
    each once, in the order first named."""
    if isinstance(tp, type) and issubclass(tp, MediaPart):
        return (tp,)
    found: list[type[MediaPart]] = []
    for arg in get_args(tp):
        found.extend(kind for kind in media_classes(arg) if kind not in found)
    return tuple(found)


def split_media(
    value: object, kinds: tuple[type[MediaPart], ...] = (MediaPart,)
) -> tuple[object, tuple[MediaPart, ...]]:
    """(``value`` with each media part in it — itself, or an item of its lists and tuples — of
    one of ``kinds`` replaced by its description, the parts in order). A part of another kind
    stays where it is: the result's type, which has no such part, then refuses it."""
    if isinstance(value, MediaPart):
        return (value.describe(), (value,)) if isinstance(value, kinds) else (value, ())
    if not isinstance(value, list | tuple):
        return value, ()
    parts: list[MediaPart] = []
    items: list[object] = []
    for item in value:
        shown, found = split_media(item, kinds)
        items.append(shown)
        parts.extend(found)
    return (items if isinstance(value, list) else tuple(items)), tuple(parts)


def _has_host(url: str) -> bool:
    """Whether an ``http(s)`` URL names a host (and a port, if any, from 0 to 65535) and holds
    no control character (a line break would end the request line it is fetched with)."""
    if any(unicodedata.category(char) == "Cc" for char in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises for a port that is not a number up to 65535
    except ValueError:
        return False
    return bool(parts.hostname)

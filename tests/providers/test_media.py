"""Images, documents and audio in prompts: each provider's native form (pure mappings), the wire
bodies over the loopback server, the refusal of a model that cannot take a part before anything
is sent, and the bytes kept once per digest across runs and turns."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from effectagent import Agent, Toolkit, open_runtime, tool
from effectagent.ai import (
    AudioPart,
    DocumentPart,
    ImagePart,
    MediaNotSupported,
    ModelRequest,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from effectagent.core import ToolCallSettled, ToolSuccess, UserInputRecorded
from effectagent.effect import Layer
from effectagent.engine import ConversationLogService, InMemoryConversationLog
from effectagent.providers import (
    Anthropic,
    Gemini,
    MediaSupport,
    OpenAIChat,
    OpenAICompatible,
    OpenAIResponses,
    media_support,
)
from effectagent.providers._anthropic_messages import anthropic_request_body
from effectagent.providers._gemini_content import gemini_request
from effectagent.providers._media import media_problem
from effectagent.providers._openai_chat import chat_request_body
from effectagent.providers._openai_responses import responses_request_body

from .conftest import KEY
from .helpers import failure
from .replay import ReplayServer, Reply
from .targets import TARGETS, Target

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))
PDF = b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(32)

IMAGE = ImagePart(PNG, name="cat.png")
PDF_DOC = DocumentPart(PDF, name="report.pdf")
TEXT_DOC = DocumentPart(b"line one\nline two\n", media_type="text/markdown", name="notes.md")
AUDIO = AudioPart(WAV, name="hello.wav")
URL_IMAGE = ImagePart(url="https://example.com/cat.png")

PNG64 = base64.b64encode(PNG).decode()
PDF64 = base64.b64encode(PDF).decode()
WAV64 = base64.b64encode(WAV).decode()


def ask(*content: Any) -> ModelRequest:
    parts = tuple(TextContent(p) if isinstance(p, str) else p for p in content)
    return ModelRequest((UserMessage(parts),))


def with_tool_image() -> ModelRequest:
    from effectagent.ai import AssistantMessage, ToolCallContent

    return ModelRequest(
        (
            UserMessage.text("Show me the chart."),
            AssistantMessage((ToolCallContent("call_1", "chart", {}),)),
            ToolMessage((ToolResultContent("call_1", "chart", "drawn", media=(IMAGE,)),)),
        )
    )


# ---- pure mappings ---------------------------------------------------------------------------


def test_chat_completions_takes_image_url_file_and_input_audio() -> None:
    body = chat_request_body(ask("Look:", IMAGE, PDF_DOC, AUDIO, TEXT_DOC, URL_IMAGE), "gpt-4o")
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
        {
            "type": "file",
            "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"},
        },
        {"type": "input_audio", "input_audio": {"data": WAV64, "format": "wav"}},
        {"type": "text", "text": "[document: notes.md]\nline one\nline two\n"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]


def test_chat_completions_sends_a_tools_media_as_a_user_message_after_its_results() -> None:
    messages = chat_request_body(with_tool_image(), "gpt-4.1")["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[2]["content"] == "drawn"
    assert messages[3]["content"] == [
        {"type": "text", "text": "[The media returned by the call call_1 of the tool chart:]"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
    ]


def test_responses_takes_input_image_input_file_and_input_audio() -> None:
    body = responses_request_body(ask("Look:", IMAGE, PDF_DOC, AUDIO), "gpt-4.1")
    assert body["input"][0]["content"] == [
        {"type": "input_text", "text": "Look:"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG64}", "detail": "auto"},
        {
            "type": "input_file",
            "filename": "report.pdf",
            "file_data": f"data:application/pdf;base64,{PDF64}",
        },
        {"type": "input_audio", "input_audio": {"data": WAV64, "format": "wav"}},
    ]
    pdf_url = DocumentPart(url="https://example.com/a.pdf")
    (item,) = responses_request_body(ask(pdf_url), "gpt-4.1")["input"][0]["content"]
    assert item == {"type": "input_file", "file_url": "https://example.com/a.pdf"}


def test_responses_puts_a_tools_media_in_its_output_list() -> None:
    items = responses_request_body(with_tool_image(), "gpt-4.1")["input"]
    (output,) = [i for i in items if i.get("type") == "function_call_output"]
    assert output["output"] == [
        {"type": "input_text", "text": "drawn"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG64}", "detail": "auto"},
    ]


def test_anthropic_takes_image_and_document_blocks() -> None:
    body = anthropic_request_body(
        ask("Look:", IMAGE, PDF_DOC, TEXT_DOC, URL_IMAGE), "claude-sonnet-4-5", max_tokens=100
    )
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Look:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG64}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64},
            "title": "report.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "line one\nline two\n"},
            "title": "notes.md",
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
    ]
    with pytest.raises(MediaNotSupported, match="Anthropic takes no audio"):
        anthropic_request_body(ask(AUDIO), "claude-sonnet-4-5", max_tokens=100)


def test_anthropic_puts_a_tools_media_in_its_tool_result() -> None:
    body = anthropic_request_body(with_tool_image(), "claude-sonnet-4-5", max_tokens=100)
    (result,) = body["messages"][2]["content"]
    assert result["content"] == [
        {"type": "text", "text": "drawn"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG64}},
    ]


def test_gemini_takes_inline_data_and_file_data() -> None:
    contents, _ = gemini_request(ask("Look:", IMAGE, AUDIO, URL_IMAGE), max_tokens=100)
    assert contents[0]["parts"] == [
        {"text": "Look:"},
        {"inline_data": {"mime_type": "image/png", "data": PNG}},
        {"inline_data": {"mime_type": "audio/wav", "data": WAV}},
        {"file_data": {"file_uri": "https://example.com/cat.png", "mime_type": "image/png"}},
    ]


def test_gemini_puts_a_tools_media_in_its_function_response_parts() -> None:
    contents, _ = gemini_request(with_tool_image(), max_tokens=100)
    (part,) = contents[2]["parts"]
    assert part["function_response"]["parts"] == [
        {"inline_data": {"mime_type": "image/png", "data": PNG}}
    ]


# ---- what each model takes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "model", "kinds"),
    [
        ("openai-chat", "gpt-4.1", {"image", "document"}),
        ("openai-responses", "gpt-5", {"image", "document"}),
        ("openai-chat", "gpt-4o-audio-preview", {"audio"}),
        ("openai-chat", "gpt-3.5-turbo", set()),
        ("openai-chat", "o3-mini", set()),
        ("openai-compatible", "llava", set()),
        ("anthropic", "claude-3-5-haiku-latest", {"image", "document"}),
        ("anthropic", "claude-2.1", set()),
        ("gemini", "gemini-2.5-flash", {"image", "document", "audio"}),
        ("google", "gemini-2.5-flash", {"image", "document", "audio"}),  # the provider's name
    ],
)
def test_the_table_knows_what_each_model_family_takes(
    family: Any, model: str, kinds: set[str]
) -> None:
    assert media_support(family, model).kinds == kinds


@pytest.mark.parametrize("family", ["bogus", "Anthropic", "openai"])
def test_a_family_the_table_does_not_know_is_refused_not_taken_for_text_only(family: Any) -> None:
    with pytest.raises(ValueError, match=f"unknown model family {family!r}; one of 'anthropic'"):
        media_support(family, "claude-sonnet-4-5")


@pytest.mark.parametrize("model", [5, None, b"gpt-4o"])
def test_a_model_name_that_is_not_a_str_is_refused_with_a_sentence(model: Any) -> None:
    with pytest.raises(TypeError, match="media_support: a model's name is a str, got"):
        media_support("openai-chat", model)


def test_a_part_over_the_models_bounds_is_refused_by_size() -> None:
    support = MediaSupport.of("image", max_part_bytes=64)
    problem = media_problem(ask(IMAGE).messages, support, "OpenAI", "gpt-4.1")
    assert problem is not None
    assert str(problem) == (
        "[image: cat.png, 80 bytes] is over the 64 bytes OpenAI model 'gpt-4.1' takes in one "
        "part; it was not sent"
    )
    whole = MediaSupport(frozenset({"image"}), max_part_bytes=100, max_request_bytes=100)
    problem = media_problem(ask(IMAGE, IMAGE).messages, whole, "OpenAI", "gpt-4.1")
    assert problem is not None
    assert "the request's media come to 160 bytes" in str(problem)
    # One byte over a limit that reads the same rounded: both counts exact.
    big = ImagePart(PNG + bytes(2048), name="big.png")
    near = MediaSupport.of("image", max_part_bytes=big.size - 1)
    problem = media_problem(ask(big).messages, near, "OpenAI", "gpt-4.1")
    assert problem is not None
    assert str(problem).startswith(
        "[image: big.png, 2.1 KiB] (2,128 bytes) is over the 2,127 bytes"
    )
    assert media_problem(ask("text alone").messages, MediaSupport(), "OpenAI", "x") is None


# ---- on the wire -----------------------------------------------------------------------------

MEDIA_TARGETS = [t for t in TARGETS if t.name != "openai-compatible"]


def user_content(target: Target, body: dict[str, Any]) -> list[Any]:
    """The parts of the request's last user message, as the wire carried them."""
    if target.name == "gemini":
        return list(body["contents"][-1]["parts"])
    if target.name == "openai-responses":
        return list(body["input"][-1]["content"])
    return list(body["messages"][-1]["content"])


def native_image(target: Target) -> Any:
    """The image as ``target``'s wire carries it."""
    if target.name == "gemini":  # as google-genai writes it: the blob's own keys stay snake_case
        return {"inlineData": {"data": PNG64, "mime_type": "image/png"}}
    if target.name == "openai-responses":
        return {
            "type": "input_image",
            "image_url": f"data:image/png;base64,{PNG64}",
            "detail": "auto",
        }
    if target.name == "anthropic":
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG64},
        }
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}}


@pytest.mark.parametrize("target", MEDIA_TARGETS, ids=lambda t: t.name)
async def test_an_image_reaches_each_provider_in_its_native_shape(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(target.text("A cat.")), Reply.sse(target.text("Still a cat.")))
    agent = Agent("looker", "Describe images.")
    log = InMemoryConversationLog()
    layer = target.settings(server.url, KEY).layer() + Layer.succeed(ConversationLogService, log)
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, ["What is in this picture?", IMAGE])
        assert first.status == "completed", first.error
        second = await runtime.run(agent, "And now?", conversation_id=first.conversation_id)
        assert second.status == "completed", second.error
    one, two = (r.json() for r in server.requests)
    parts = user_content(target, one)
    assert native_image(target) in parts
    assert json.dumps(one).count(PNG64) == 1
    # The next turn of the conversation sends the same bytes again, read back by digest.
    assert json.dumps(two).count(PNG64) == 1
    assert log.media_digests == {IMAGE.digest}
    (record,) = [
        e.record
        for e in await log.entries(first.conversation_id)
        if isinstance(e.record, UserInputRecorded) and e.record.parts
    ]
    assert record.parts == (
        ("text", "What is in this picture?"),
        (
            "media",
            {
                "type": "image",
                "media_type": "image/png",
                "name": "cat.png",
                "size": 80,
                "digest": IMAGE.digest,
            },
        ),
    )
    assert PNG64 not in repr(record)


@pytest.mark.parametrize(
    "settings",
    [
        lambda url: OpenAIChat("gpt-3.5-turbo", api_key=KEY, base_url=f"{url}/v1"),
        lambda url: OpenAIResponses(
            "gpt-4.1", api_key=KEY, base_url=f"{url}/v1", media=MediaSupport()
        ),
        lambda url: OpenAICompatible("qwen3", api_key=KEY, base_url=f"{url}/v1"),
        lambda url: Anthropic("claude-2.1", api_key=KEY, base_url=url),
        lambda url: Gemini(
            "gemini-2.5-flash", api_key=KEY, base_url=url, media=MediaSupport.of("image")
        ),
    ],
    ids=[
        "chat-text-only",
        "responses-overridden",
        "compatible",
        "anthropic-old",
        "gemini-no-audio",
    ],
)
async def test_a_model_that_cannot_take_a_part_refuses_before_any_request(
    settings: Any, server: ReplayServer
) -> None:
    error, parts = await failure(settings(server.url), ask("Listen:", AUDIO))
    assert isinstance(error, MediaNotSupported)
    assert "does not take audio input" in str(error)
    assert "[audio: hello.wav, 48 bytes] was not sent" in str(error)
    assert parts == []
    assert server.requests == []


async def test_a_run_on_a_text_only_model_fails_with_the_sentence_and_sends_nothing(
    server: ReplayServer,
) -> None:
    agent = Agent("looker", "Describe images.")
    layer = OpenAIChat("gpt-3.5-turbo", api_key=KEY, base_url=f"{server.url}/v1").layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, ["What is this?", IMAGE])
    assert result.status == "failed"
    assert "does not take image input (it takes text only)" in str(result.error)
    assert server.requests == []


async def test_an_overridden_model_takes_what_it_is_told(server: ReplayServer) -> None:
    chat = next(t for t in TARGETS if t.name == "openai-compatible")
    server.script(Reply.sse(chat.text("Heard.")))
    settings = OpenAICompatible(
        "llava", api_key=KEY, base_url=f"{server.url}/v1", media=MediaSupport.of("image")
    )
    agent = Agent("looker", "Describe images.")
    async with open_runtime(settings.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, [IMAGE])
    assert result.status == "completed", result.error
    (request,) = server.requests
    assert request.json()["messages"][-1]["content"] == [native_image(chat)]


# ---- a tool that returns media -----------------------------------------------------------------


@tool(readonly=True)
async def chart(title: str) -> list[str | ImagePart]:
    """Draw a chart.

    Args:
        title: The chart's title.
    """
    return [f"drawn: {title}", IMAGE]


def tool_image(target: Target, body: dict[str, Any]) -> Any:
    """Where ``target``'s wire carries an image a tool returned."""
    if target.name == "gemini":
        (part,) = [p for c in body["contents"] for p in c["parts"] if "functionResponse" in p]
        return part["functionResponse"]["parts"]
    if target.name == "openai-responses":
        (item,) = [i for i in body["input"] if i.get("type") == "function_call_output"]
        return item["output"]
    if target.name == "anthropic":
        (block,) = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"]
        return block["content"]
    return body["messages"][-1]["content"]  # Chat Completions: a user message after the results


@pytest.mark.parametrize("target", MEDIA_TARGETS, ids=lambda t: t.name)
async def test_a_tools_image_reaches_each_provider_and_is_recorded_by_digest(
    target: Target, server: ReplayServer
) -> None:
    server.script(
        Reply.sse(target.calls(("call_1", "chart", '{"title": "sales"}'))),
        Reply.sse(target.text("A rising line.")),
        Reply.sse(target.text("Yes.")),
    )
    agent = Agent("analyst", "Draw and describe.", toolkit=Toolkit(chart))
    log = InMemoryConversationLog()
    layer = (
        target.settings(server.url, KEY).layer()
        + Toolkit(chart).handlers()
        + Layer.succeed(ConversationLogService, log)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "Draw the sales chart.")
        assert first.status == "completed", first.error
        again = await runtime.run(agent, "Sure?", conversation_id=first.conversation_id)
        assert again.status == "completed", again.error
    _, second, third = (r.json() for r in server.requests)
    shown = json.dumps(tool_image(target, second))
    assert PNG64 in shown
    assert json.dumps(third).count(PNG64) == 1  # the next run sends it again, read by digest
    (settled,) = [
        e.record
        for e in await log.entries(first.conversation_id)
        if isinstance(e.record, ToolCallSettled)
    ]
    assert isinstance(settled.outcome, ToolSuccess)
    assert settled.outcome.result == ["drawn: sales", "[image: cat.png, 80 bytes]"]
    assert settled.outcome.media == (IMAGE.reference(),)
    assert log.media_digests == {IMAGE.digest}

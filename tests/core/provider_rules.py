"""What each provider family refuses in a request's conversation, as pure checks over the bodies
the adapters build (``effectagent.providers``' own request builders): each returns the problems
it finds, in words (none: the request is valid).

* **OpenAI chat** (and the OpenAI-compatible servers whose chat templates are strict, as vLLM's
  are): system messages first only; then the user speaks first; never two user turns or two
  assistant turns in a row; an assistant's tool calls are answered by tool messages right after
  it, one per call, and a tool message answers only such a call; no empty assistant message; the
  request ends with the user's turn or tool results.
* **Anthropic Messages**: the first turn is the user's; turns alternate; no turn is empty; every
  ``tool_use`` is answered by a ``tool_result`` in the next (user) turn, and a ``tool_result``
  answers a ``tool_use`` of the turn before; the request ends with the user's turn.
* **OpenAI Responses**: every ``function_call`` has its ``function_call_output`` after it, and
  every output answers a call made before it, once.
"""

from __future__ import annotations

from typing import Any

from effectagent.ai import Message
from effectagent.providers._anthropic_messages import anthropic_messages
from effectagent.providers._openai_chat import chat_messages
from effectagent.providers._openai_responses import responses_input

__all__ = ["anthropic_problems", "chat_problems", "problems", "responses_problems"]


def chat_problems(messages: tuple[Message, ...]) -> list[str]:
    """Problems of a Chat Completions request's messages (see the module notes)."""
    body = chat_messages(messages)
    found: list[str] = []
    index = 0
    while index < len(body) and body[index]["role"] == "system":
        index += 1
    rest = body[index:]
    if not rest:
        return ["no message after the system messages"]
    if rest[0]["role"] != "user":
        found.append(f"the first message is the {rest[0]['role']}'s, not the user's")
    previous = None
    pending: set[str] = set()
    for position, message in enumerate(rest):
        role = message["role"]
        if pending and role != "tool":
            found.append(f"message {position}: tool calls {sorted(pending)} have no results")
            pending = set()
        if role == "system":
            found.append(f"message {position}: a system message after the conversation began")
        elif role == "tool":
            call_id = message["tool_call_id"]
            if call_id not in pending:
                found.append(f"message {position}: a tool result for no pending call {call_id}")
            pending.discard(call_id)
        elif role == "user":
            if previous == "user":
                found.append(f"message {position}: two user turns in a row")
        elif role == "assistant":
            if previous == "assistant":
                found.append(f"message {position}: two assistant turns in a row")
            calls = message.get("tool_calls") or []
            if message.get("content") is None and not calls:
                found.append(f"message {position}: an empty assistant message")
            pending = {call["id"] for call in calls}
        previous = role
    if pending:
        found.append(f"the request ends with tool calls {sorted(pending)} unanswered")
    if previous not in ("user", "tool"):
        found.append(f"the request ends with the {previous}'s turn")
    return found


def anthropic_problems(messages: tuple[Message, ...]) -> list[str]:
    """Problems of a Messages request's turns (see the module notes)."""
    _, turns = anthropic_messages(messages)
    found: list[str] = []
    if not turns:
        return ["no turn"]
    if turns[0]["role"] != "user":
        found.append("the first turn is not the user's")
    uses: set[str] = set()
    for position, turn in enumerate(turns):
        role, content = turn["role"], turn["content"]
        if not content:
            found.append(f"turn {position}: empty")
        if position and turns[position - 1]["role"] == role:
            found.append(f"turn {position}: two {role} turns in a row")
        results = {b["tool_use_id"] for b in content if b.get("type") == "tool_result"}
        if role == "user":
            if uses - results:
                found.append(f"turn {position}: tool_use {sorted(uses - results)} not answered")
            if results - uses:
                found.append(f"turn {position}: tool_result {sorted(results - uses)} answers none")
            uses = set()
        else:
            if uses:
                found.append(f"turn {position}: tool_use {sorted(uses)} not answered")
            uses = {b["id"] for b in content if b.get("type") == "tool_use"}
    if uses:
        found.append(f"the request ends with tool_use {sorted(uses)} unanswered")
    if turns[-1]["role"] != "user":
        found.append("the request ends with the assistant's turn")
    return found


def responses_problems(messages: tuple[Message, ...]) -> list[str]:
    """Problems of a Responses request's input items (see the module notes)."""
    items = responses_input(messages)
    found: list[str] = []
    calls: set[str] = set()
    answered: set[str] = set()
    for position, item in enumerate(items):
        kind: Any = item.get("type")
        if kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            call_id = item["call_id"]
            if call_id not in calls:
                found.append(f"item {position}: an output for no call made before ({call_id})")
            if call_id in answered:
                found.append(f"item {position}: a second output for {call_id}")
            answered.add(call_id)
    if calls - answered:
        found.append(f"calls {sorted(calls - answered)} have no output")
    return found


def problems(messages: tuple[Message, ...]) -> dict[str, list[str]]:
    """Each provider family's problems with ``messages`` (only the families that have some)."""
    found = {
        "openai-chat": chat_problems(messages),
        "anthropic": anthropic_problems(messages),
        "openai-responses": responses_problems(messages),
    }
    return {family: listed for family, listed in found.items() if listed}

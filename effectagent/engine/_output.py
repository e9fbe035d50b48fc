"""What the model is told about the shape of the final answer (``Agent(output=T)``).

Every request of an agent with an output type carries that type's JSON Schema as an
``OutputFormat``: a model adapter that can constrain its output (``native_output = True`` on the
model: OpenAI's ``json_schema`` response format, Anthropic's structured output) sends it in its
provider's own form. A model that cannot — one without the attribute, like a test double or a
plain chat endpoint — gets the schema in its instructions instead, with the request to answer with
nothing but that JSON. Either way the engine decodes the answer strictly and sends a bad one back
(``AgentPolicy.output_retries``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, final

from effectagent.ai import OutputFormat, ToolDescriptor, ToolSnapshot
from effectagent.core import Agent, OneOf, Redactor
from effectagent.effect import json_schema

__all__ = [
    "SourceSecrets",
    "descriptor_holds_secret",
    "output_format",
    "request_output",
    "schema_holds_secret",
    "system_instructions",
]

_NAME = re.compile(r"[^A-Za-z0-9_-]")


def output_format(output: Any) -> OutputFormat:
    """The ``OutputFormat`` of an output type: its JSON Schema and a name a provider accepts."""
    if isinstance(output, OneOf):  # the wrapper with a discriminator (``core._one_of``)
        return OutputFormat("_or_".join(output.names)[:64], output.json_schema())
    name = _NAME.sub("_", getattr(output, "__name__", "output"))[:64] or "output"
    return OutputFormat(name, json_schema(output))


def request_output(agent: Agent) -> OutputFormat | None:
    """The ``OutputFormat`` an agent's requests carry: None without an output type, and in the
    tool output mode (its answer is a final_result call: see ``_output_modes``)."""
    output = agent.output
    if output is None or agent.output_mode == "tool":
        return None
    return output_format(output)


def system_instructions(instructions: str, output: OutputFormat | None, model: object) -> str:
    """The agent's instructions, plus the output schema for a model that cannot take it natively."""
    if output is None or getattr(model, "native_output", False):
        return instructions
    schema = json.dumps(output.schema, ensure_ascii=False, separators=(",", ":"))
    return (
        f"{instructions}\n\n"
        "When you give your final answer, reply with only a JSON value (no prose, no code "
        f"fence) that matches this JSON Schema:\n{schema}"
    )


def _plain(value: Any) -> Any:
    """``value`` (a JSON value, or mappings and sequences of them) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def schema_holds_secret(schema: Mapping[str, Any], redactor: Redactor) -> bool:
    """Whether a JSON Schema the model is sent as written holds what ``redactor`` removes."""
    plain = _plain(schema)
    return bool(redactor.redact(plain) != plain)


def descriptor_holds_secret(descriptor: ToolDescriptor, redactor: Redactor) -> bool:
    """Whether what the model is told of a tool — its name, title, description and parameter
    schema, sent as written with every request — holds what ``redactor`` removes."""
    told = _plain(
        [descriptor.name, descriptor.title, descriptor.description, descriptor.parameters]
    )
    return bool(redactor.redact(told) != told)


@final
class SourceSecrets:
    """Which tools of each tool source's snapshot hold what ``redactor`` removes (in their name,
    title, description or schema), so that a run leaves them out: checked once per snapshot —
    a source hands out the same snapshot until its tools change — not again in every run.
    Keeps one snapshot per source (by its place in the agent's sources)."""

    __slots__ = ("_last", "_redactor")

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._last: dict[int, tuple[ToolSnapshot, frozenset[str]]] = {}

    def holding(self, source: int, snapshot: ToolSnapshot) -> frozenset[str]:
        """The names of ``snapshot``'s tools that hold a secret (``source``: its place)."""
        last = self._last.get(source)
        if last is not None and last[0] is snapshot:
            return last[1]
        names = frozenset(
            tool.name
            for tool in snapshot.tools
            if descriptor_holds_secret(
                ToolDescriptor(
                    tool.name,
                    tool.description,
                    tool.parameters_schema,
                    title=tool.annotations.title,
                ),
                self._redactor,
            )
        )
        self._last[source] = (snapshot, names)
        return names

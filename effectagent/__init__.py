"""effectagent: a Trio-native runtime for LLM agents, built on a small effect system.

The names most programs need are re-exported here — an agent and its policy, tools and toolkits,
the runtime, and services as Layers — and each subpackage has the rest: ``effectagent.effect``
(the effect core: ``Exit``, ``Cause``, ``attempt``, …), ``effectagent.ai`` (LanguageModel,
prompts, AI errors, …), ``effectagent.core`` (events, records, outcomes, redaction),
``effectagent.engine`` (runtime and seams), ``effectagent.providers`` (model adapters),
``effectagent.testing`` (ScriptedModel and hypothesis strategies).
"""

from effectagent.ai import LanguageModelService as LanguageModelService
from effectagent.ai import Tool as Tool
from effectagent.ai import ToolCallContext as ToolCallContext
from effectagent.ai import Toolkit as Toolkit
from effectagent.ai import tool as tool
from effectagent.core import Agent as Agent
from effectagent.core import AgentPolicy as AgentPolicy
from effectagent.core import ChildBudget as ChildBudget
from effectagent.core import RunAllowance as RunAllowance
from effectagent.effect import Context as Context
from effectagent.effect import Layer as Layer
from effectagent.effect import ServiceKey as ServiceKey
from effectagent.effect import TaggedError as TaggedError
from effectagent.engine import RunResult as RunResult
from effectagent.engine import Runtime as Runtime
from effectagent.engine import open_runtime as open_runtime
from effectagent.engine import run_sync as run_sync

__all__ = [
    "Agent",
    "AgentPolicy",
    "ChildBudget",
    "Context",
    "LanguageModelService",
    "Layer",
    "RunAllowance",
    "RunResult",
    "Runtime",
    "ServiceKey",
    "TaggedError",
    "Tool",
    "ToolCallContext",
    "Toolkit",
    "open_runtime",
    "run_sync",
    "tool",
]

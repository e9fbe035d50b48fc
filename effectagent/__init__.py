"""effectagent: a Trio-native runtime for LLM agents, built on a small effect system.

The names most programs need are re-exported here; each subpackage has the rest:
``effectagent.effect`` (the effect core), ``effectagent.ai`` (Tool, ``@tool``, Toolkit,
LanguageModel, …), ``effectagent.core`` (Agent, policy, events, records), ``effectagent.engine``
(runtime and seams), ``effectagent.testing`` (ScriptedModel and hypothesis strategies).
"""

from effectagent.ai import LanguageModel as LanguageModel
from effectagent.ai import LanguageModelService as LanguageModelService
from effectagent.ai import Tool as Tool
from effectagent.ai import ToolCallContext as ToolCallContext
from effectagent.ai import Toolkit as Toolkit
from effectagent.ai import tool as tool
from effectagent.core import Agent as Agent
from effectagent.core import AgentPolicy as AgentPolicy
from effectagent.core import ChildBudget as ChildBudget
from effectagent.effect import Context as Context
from effectagent.effect import Exit as Exit
from effectagent.effect import Failure as Failure
from effectagent.effect import Layer as Layer
from effectagent.effect import ServiceKey as ServiceKey
from effectagent.effect import Success as Success
from effectagent.effect import TaggedError as TaggedError
from effectagent.effect import attempt as attempt
from effectagent.engine import RunResult as RunResult
from effectagent.engine import Runtime as Runtime
from effectagent.engine import open_runtime as open_runtime
from effectagent.engine import run_sync as run_sync

__all__ = [
    "Agent",
    "AgentPolicy",
    "ChildBudget",
    "Context",
    "Exit",
    "Failure",
    "LanguageModel",
    "LanguageModelService",
    "Layer",
    "RunResult",
    "Runtime",
    "ServiceKey",
    "Success",
    "TaggedError",
    "Tool",
    "ToolCallContext",
    "Toolkit",
    "attempt",
    "open_runtime",
    "run_sync",
    "tool",
]

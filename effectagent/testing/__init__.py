"""Testing support shipped to users: a scripted model, a model computed from each request, hypothesis strategies for tool batches, and
a harness that runs a batch through the real engine on Trio's mock clock.

``batches`` needs ``hypothesis`` (in the ``dev`` extra); it is imported when a strategy is built,
so ScriptedModel and the harness work without it.
"""

from ._function_model import FunctionModel as FunctionModel
from ._function_model import Respond as Respond
from ._harness import BatchReport as BatchReport
from ._harness import HandlerTrace as HandlerTrace
from ._harness import SimulatedDefect as SimulatedDefect
from ._harness import run_batch as run_batch
from ._harness import run_batch_sync as run_batch_sync
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptExhausted as ScriptExhausted
from ._scripted import Turn as Turn
from ._scripted import UnconsumedScript as UnconsumedScript
from ._strategies import BEHAVIOURS as BEHAVIOURS
from ._strategies import PROBE_TOOLKIT as PROBE_TOOLKIT
from ._strategies import BatchSpec as BatchSpec
from ._strategies import Behaviour as Behaviour
from ._strategies import CallSpec as CallSpec
from ._strategies import OutcomeKind as OutcomeKind
from ._strategies import ProbeFailed as ProbeFailed
from ._strategies import batches as batches

__all__ = [
    "FunctionModel",
    "Respond",
    "ScriptExhausted",
    "ScriptedModel",
    "Turn",
    "UnconsumedScript",
    "BEHAVIOURS",
    "PROBE_TOOLKIT",
    "BatchReport",
    "BatchSpec",
    "Behaviour",
    "CallSpec",
    "HandlerTrace",
    "OutcomeKind",
    "ProbeFailed",
    "SimulatedDefect",
    "batches",
    "run_batch",
    "run_batch_sync",
]

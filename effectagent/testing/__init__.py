"""Testing support shipped to users: a scripted model, a model computed from each request, hypothesis strategies for tool batches, and
a harness that runs a batch through the real engine on Trio's mock clock.

``batches`` needs ``hypothesis`` (in the ``dev`` extra); it is imported when a strategy is built,
so ScriptedModel and the harness work without it. A script that runs out, or is left with turns
unused, fails the test with an ``AssertionError`` saying so.
"""

from ._function_model import FunctionModel as FunctionModel
from ._harness import BatchReport as BatchReport
from ._harness import SimulatedDefect as SimulatedDefect
from ._harness import run_batch as run_batch
from ._harness import run_batch_sync as run_batch_sync
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import Turn as Turn
from ._strategies import PROBE_TOOLKIT as PROBE_TOOLKIT
from ._strategies import BatchSpec as BatchSpec
from ._strategies import CallSpec as CallSpec
from ._strategies import batches as batches

__all__ = [
    "FunctionModel",
    "ScriptedModel",
    "Turn",
    "PROBE_TOOLKIT",
    "BatchReport",
    "BatchSpec",
    "CallSpec",
    "SimulatedDefect",
    "batches",
    "run_batch",
    "run_batch_sync",
]

"""Testing support shipped to users: a scripted model, a model computed from each request, hypothesis strategies for tool batches, and
a harness that runs a batch through the real engine on Trio's mock clock; cassettes — a real run
recorded (``record``) and replayed offline as a deterministic test (``ReplayModel``), the same
canonical records asserted (``assert_same_records``) — and chaos: faults drawn at random around a
cassette or a scripted model (``fault_plans``, ``run_chaos_sync``) with a checker of the
invariants a run must keep.

``batches`` and ``fault_plans`` need ``hypothesis`` (in the ``dev`` extra); it is imported when a
strategy is built, so the models, cassettes and harnesses work without it.

A script that runs out fails the run: the model raises ``ScriptExhausted`` (an ``AssertionError``)
from its stream, and the run ends failed, its ``EngineDefect`` quoting it. Turns left unused are
reported only when asked: ``ScriptedModel.assert_consumed()`` raises ``UnconsumedScript`` (an
``AssertionError``), ``ScriptedModel.check()`` raises either, and a model given as
``ScriptedModel.layer(turns, check=True)`` (or ``model.as_layer(check=True)``) runs that check
when the runtime's block is left. A replay whose run asks what the cassette does not hold fails
the run the same way, and raises its ``CassetteDivergence`` (an ``AssertionError``) again when
the runtime's block is left.
"""

from ._cassette import CASSETTE_VERSION as CASSETTE_VERSION
from ._cassette import Cassette as Cassette
from ._cassette import CassetteError as CassetteError
from ._cassette import Exchange as Exchange
from ._chaos import ChaosReport as ChaosReport
from ._chaos import FaultPlan as FaultPlan
from ._chaos import ModelFault as ModelFault
from ._chaos import ToolFault as ToolFault
from ._chaos import fault_plans as fault_plans
from ._chaos import invariant_violations as invariant_violations
from ._chaos import run_chaos as run_chaos
from ._chaos import run_chaos_sync as run_chaos_sync
from ._chaos import with_faults as with_faults
from ._export import cassette_of_log as cassette_of_log
from ._function_model import FunctionModel as FunctionModel
from ._harness import BatchReport as BatchReport
from ._harness import SimulatedDefect as SimulatedDefect
from ._harness import run_batch as run_batch
from ._harness import run_batch_sync as run_batch_sync
from ._record import record as record
from ._replay import CassetteDivergence as CassetteDivergence
from ._replay import ReplayModel as ReplayModel
from ._same_records import RecordsDiffer as RecordsDiffer
from ._same_records import assert_same_records as assert_same_records
from ._same_records import canonical_records as canonical_records
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptExhausted as ScriptExhausted
from ._scripted import Turn as Turn
from ._scripted import UnconsumedScript as UnconsumedScript
from ._strategies import PROBE_TOOLKIT as PROBE_TOOLKIT
from ._strategies import BatchSpec as BatchSpec
from ._strategies import CallSpec as CallSpec
from ._strategies import batches as batches

__all__ = [
    "FunctionModel",
    "ScriptExhausted",
    "ScriptedModel",
    "Turn",
    "UnconsumedScript",
    "PROBE_TOOLKIT",
    "BatchReport",
    "BatchSpec",
    "CallSpec",
    "SimulatedDefect",
    "batches",
    "run_batch",
    "run_batch_sync",
    # cassettes: record, replay, the same records
    "CASSETTE_VERSION",
    "Cassette",
    "CassetteDivergence",
    "CassetteError",
    "Exchange",
    "RecordsDiffer",
    "ReplayModel",
    "assert_same_records",
    "canonical_records",
    "cassette_of_log",
    "record",
    # chaos
    "ChaosReport",
    "FaultPlan",
    "ModelFault",
    "ToolFault",
    "fault_plans",
    "invariant_violations",
    "run_chaos",
    "run_chaos_sync",
    "with_faults",
]

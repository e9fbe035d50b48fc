"""Sandbox and CodeExecutor ports, with isolating implementations (see ``docs/guides/sandbox.md``).

The command-shaped port is :class:`Sandbox` (``async with sandbox.execute(request) as events``);
:class:`LocalProcessSandbox` is an unisolated development runner, :class:`BubblewrapSandbox` an
isolating one. The program-shaped port is :class:`CodeExecutor`, implemented by
:class:`DenoCodeExecutor`. Every implementation states its posture as a
:class:`SandboxImplementation`, gives every limit a finite default (:data:`UNLIMITED` lifts one,
explicitly), and shows what its workloads hold on the host while they run
(:class:`OwnedResources`). The isolating ones never run a workload as host root
(:class:`WorkloadIdentity`); the local runner runs it as this process's own user, and says so.

Every error is a :class:`SandboxError`. Those exported here are the ones a caller may handle
differently: a missing runtime (:class:`SandboxUnavailable`, :class:`ExecutorUnavailable`), a
limit this host cannot enforce (:class:`LimitNotEnforceable`), a command that does not exist, and
each :class:`CodeExecutionError` a program can stop with — a limit it hit, its own throw, a crash
(Code Mode tells the model which). The rest — an invalid request, a crashed command runner, a
secret or artifact refused, a host call answered with something that is not JSON — are
``SandboxError``\\ s whose message says what happened. The isolation building blocks (host
probing, the bubblewrap command line, cgroups, rlimits, process-group kill) are the runners' own,
not part of the API.
"""

# ruff: noqa: I001  (imports are grouped by concept, like __all__)

# ---- posture (shared by every executor) ----------------------------------------------------------
from ._posture import Isolation as Isolation
from ._posture import LimitNotEnforceable as LimitNotEnforceable
from ._posture import SandboxError as SandboxError
from ._posture import SandboxImplementation as SandboxImplementation
from ._posture import UNLIMITED as UNLIMITED
from ._posture import Unlimited as Unlimited
from ._ownership import OwnedResources as OwnedResources
from ._identity import WorkloadIdentity as WorkloadIdentity

# ---- the command Sandbox port --------------------------------------------------------------------
from ._command import Artifact as Artifact
from ._command import ArtifactRule as ArtifactRule
from ._command import CommandNotFound as CommandNotFound
from ._command import Mount as Mount
from ._command import MountMode as MountMode
from ._command import NetworkPolicy as NetworkPolicy
from ._command import OutputChunk as OutputChunk
from ._command import ResourceUsage as ResourceUsage
from ._command import Sandbox as Sandbox
from ._command import SandboxEvent as SandboxEvent
from ._command import SandboxExecution as SandboxExecution
from ._command import SandboxExited as SandboxExited
from ._command import SandboxLimits as SandboxLimits
from ._command import SandboxRequest as SandboxRequest
from ._command import SandboxResult as SandboxResult
from ._command import SandboxService as SandboxService
from ._command import SandboxStarted as SandboxStarted
from ._command import SandboxUnavailable as SandboxUnavailable
from ._command import SecretHandle as SecretHandle
from ._command import SecretResolver as SecretResolver
from ._command import SecretResolverService as SecretResolverService
from ._command import run as run

# ---- command runners -----------------------------------------------------------------------------
from ._bwrap import BubblewrapSandbox as BubblewrapSandbox
from ._local import LocalProcessSandbox as LocalProcessSandbox

# ---- the CodeExecutor port and the Deno executor ------------------------------------------------
from ._code import CodeExecutionError as CodeExecutionError
from ._code import CodeExecutionHost as CodeExecutionHost
from ._code import CodeExecutionLimits as CodeExecutionLimits
from ._code import CodeExecutionRequest as CodeExecutionRequest
from ._code import CodeExecutionResult as CodeExecutionResult
from ._code import CodeExecutor as CodeExecutor
from ._code import CodeExecutorService as CodeExecutorService
from ._code import CodeTimeout as CodeTimeout
from ._code import ExecutorCrashed as ExecutorCrashed
from ._code import ExecutorUnavailable as ExecutorUnavailable
from ._code import HostCallFailed as HostCallFailed
from ._code import HostCallLimitExceeded as HostCallLimitExceeded
from ._code import HostCallOutcome as HostCallOutcome
from ._code import HostCallSucceeded as HostCallSucceeded
from ._code import HostCallTooLarge as HostCallTooLarge
from ._code import InvalidProgram as InvalidProgram
from ._code import JSONTooDeep as JSONTooDeep
from ._code import LogLine as LogLine
from ._code import MemoryLimitExceeded as MemoryLimitExceeded
from ._code import OutputLimitExceeded as OutputLimitExceeded
from ._code import ProgramThrew as ProgramThrew
from ._code import ResultTooLarge as ResultTooLarge
from ._code import SourceTooLarge as SourceTooLarge
from ._deno import DenoCodeExecutor as DenoCodeExecutor
from ._deno import deno_executor_layer as deno_executor_layer
from ._deno import open_deno_executor as open_deno_executor

__all__ = [
    # posture
    "Isolation",
    "SandboxImplementation",
    "SandboxError",
    "UNLIMITED",
    "Unlimited",
    "OwnedResources",
    "WorkloadIdentity",
    "LimitNotEnforceable",
    # the command Sandbox port
    "Sandbox",
    "SandboxService",
    "SandboxRequest",
    "SandboxLimits",
    "Mount",
    "MountMode",
    "NetworkPolicy",
    "SecretHandle",
    "SecretResolver",
    "SecretResolverService",
    "ArtifactRule",
    "SandboxEvent",
    "SandboxExecution",
    "SandboxStarted",
    "OutputChunk",
    "ResourceUsage",
    "SandboxExited",
    "SandboxResult",
    "Artifact",
    "CommandNotFound",
    "SandboxUnavailable",
    "run",
    # command runners
    "LocalProcessSandbox",
    "BubblewrapSandbox",
    # the CodeExecutor port
    "CodeExecutor",
    "CodeExecutorService",
    "CodeExecutionHost",
    "CodeExecutionRequest",
    "CodeExecutionLimits",
    "CodeExecutionResult",
    "LogLine",
    "HostCallOutcome",
    "HostCallSucceeded",
    "HostCallFailed",
    # CodeExecutor errors: each way a pass can stop
    "CodeExecutionError",
    "SourceTooLarge",
    "InvalidProgram",
    "CodeTimeout",
    "MemoryLimitExceeded",
    "OutputLimitExceeded",
    "ResultTooLarge",
    "HostCallLimitExceeded",
    "HostCallTooLarge",
    "JSONTooDeep",
    "ProgramThrew",
    "ExecutorCrashed",
    "ExecutorUnavailable",
    # the Deno executor
    "DenoCodeExecutor",
    "open_deno_executor",
    "deno_executor_layer",
]

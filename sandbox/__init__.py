"""Sandbox and CodeExecutor ports, with isolating implementations (spec §9, CAP-010, CAP-015).

The command-shaped port is :class:`Sandbox` (``async with sandbox.execute(request) as events``);
:class:`LocalProcessSandbox` is an unisolated development runner, :class:`BubblewrapSandbox` an
isolating one. The program-shaped port is :class:`CodeExecutor`, implemented by
:class:`DenoCodeExecutor`. Every implementation states its posture as a
:class:`SandboxImplementation`, gives every limit a finite default (:data:`UNLIMITED` lifts one,
explicitly), never runs a workload as host root (:class:`WorkloadIdentity`), and shows what its
workloads hold on the host while they run (:class:`OwnedResources`).
"""

# ruff: noqa: I001  (imports are grouped by concept, like __all__)

# ---- posture (shared by every executor) ----------------------------------------------------------
from ._posture import LIMIT_CPU as LIMIT_CPU
from ._posture import LIMIT_FILE_SIZE as LIMIT_FILE_SIZE
from ._posture import LIMIT_MEMORY as LIMIT_MEMORY
from ._posture import LIMIT_NETWORK as LIMIT_NETWORK
from ._posture import LIMIT_OUTPUT as LIMIT_OUTPUT
from ._posture import LIMIT_PROCESSES as LIMIT_PROCESSES
from ._posture import LIMIT_WALL_CLOCK as LIMIT_WALL_CLOCK
from ._posture import Isolation as Isolation
from ._posture import LimitNotEnforceable as LimitNotEnforceable
from ._posture import SandboxError as SandboxError
from ._posture import SandboxImplementation as SandboxImplementation
from ._posture import UNLIMITED as UNLIMITED
from ._posture import Unlimited as Unlimited
from ._ownership import OwnedResources as OwnedResources
from ._identity import WorkloadIdentity as WorkloadIdentity

# ---- host facts and isolation building blocks ----------------------------------------------------
from ._isolation import CgroupCpuSupport as CgroupCpuSupport
from ._isolation import CgroupMemorySupport as CgroupMemorySupport
from ._isolation import CgroupPidsSupport as CgroupPidsSupport
from ._isolation import HostFacts as HostFacts
from ._isolation import CpuCgroup as CpuCgroup
from ._isolation import MemoryCgroup as MemoryCgroup
from ._isolation import PidsCgroup as PidsCgroup
from ._isolation import ProcessLimits as ProcessLimits
from ._isolation import apply_rlimits as apply_rlimits
from ._isolation import bwrap_argv as bwrap_argv
from ._isolation import kill_process_group as kill_process_group
from ._isolation import probe_host as probe_host
from ._isolation import rlimit_preexec as rlimit_preexec

# ---- the command Sandbox port --------------------------------------------------------------------
from ._command import LIMIT_ARTIFACTS as LIMIT_ARTIFACTS
from ._command import LIMIT_FILESYSTEM as LIMIT_FILESYSTEM
from ._command import Artifact as Artifact
from ._command import ArtifactLimitExceeded as ArtifactLimitExceeded
from ._command import ArtifactRule as ArtifactRule
from ._command import CommandNotFound as CommandNotFound
from ._command import InvalidRequest as InvalidRequest
from ._command import Mount as Mount
from ._command import MountMode as MountMode
from ._command import NetworkPolicy as NetworkPolicy
from ._command import OutputChunk as OutputChunk
from ._command import ResourceUsage as ResourceUsage
from ._command import Sandbox as Sandbox
from ._command import SandboxCrashed as SandboxCrashed
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
from ._command import SecretUnavailable as SecretUnavailable
from ._command_checks import check_enforceable as check_enforceable
from ._command_checks import required_limits as required_limits
from ._command import run as run
from ._command_checks import validate_request as validate_request

# ---- command runners -----------------------------------------------------------------------------
from ._bwrap import WORKDIR as WORKDIR
from ._bwrap import BubblewrapSandbox as BubblewrapSandbox
from ._local import LocalProcessSandbox as LocalProcessSandbox

# ---- the CodeExecutor port and the Deno executor ------------------------------------------------
from ._code import LIMIT_HOST_CALL_ARGUMENT as LIMIT_HOST_CALL_ARGUMENT
from ._code import LIMIT_HOST_CALL_RESULT as LIMIT_HOST_CALL_RESULT
from ._code import LIMIT_HOST_CALLS as LIMIT_HOST_CALLS
from ._code import LIMIT_JSON_DEPTH as LIMIT_JSON_DEPTH
from ._code import LIMIT_RESULT as LIMIT_RESULT
from ._code import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from ._code import LIMIT_SOURCE as LIMIT_SOURCE
from ._code import CodeExecutionError as CodeExecutionError
from ._code import CodeExecutionHost as CodeExecutionHost
from ._code import CodeExecutionHostService as CodeExecutionHostService
from ._code import CodeExecutionLimits as CodeExecutionLimits
from ._code import CodeExecutionRequest as CodeExecutionRequest
from ._code import CodeExecutionResult as CodeExecutionResult
from ._code import CodeExecutor as CodeExecutor
from ._code import CodeExecutorService as CodeExecutorService
from ._code import CodeLimitNotEnforceable as CodeLimitNotEnforceable
from ._code import CodeTimeout as CodeTimeout
from ._code import ExecutorCrashed as ExecutorCrashed
from ._code import ExecutorUnavailable as ExecutorUnavailable
from ._code import HostCallFailed as HostCallFailed
from ._code import HostCallLimitExceeded as HostCallLimitExceeded
from ._code import HostCallOutcome as HostCallOutcome
from ._code import HostCallSucceeded as HostCallSucceeded
from ._code import HostCallTooLarge as HostCallTooLarge
from ._code import InvalidHostResult as InvalidHostResult
from ._code import InvalidProgram as InvalidProgram
from ._code import JSONTooDeep as JSONTooDeep
from ._code import LogLevel as LogLevel
from ._code import LogLine as LogLine
from ._code import MemoryLimitExceeded as MemoryLimitExceeded
from ._code import OutputLimitExceeded as OutputLimitExceeded
from ._code import ProgramThrew as ProgramThrew
from ._code import ResultTooLarge as ResultTooLarge
from ._code import SourceTooLarge as SourceTooLarge
from ._code import execute_in as execute_in
from ._code import host_layer as host_layer
from ._deno import DENO_MIN_PROCESSES as DENO_MIN_PROCESSES
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
    "LIMIT_ARTIFACTS",
    "LIMIT_CPU",
    "LIMIT_FILE_SIZE",
    "LIMIT_FILESYSTEM",
    "LIMIT_MEMORY",
    "LIMIT_NETWORK",
    "LIMIT_OUTPUT",
    "LIMIT_PROCESSES",
    "LIMIT_WALL_CLOCK",
    # host facts and building blocks
    "HostFacts",
    "CgroupCpuSupport",
    "CgroupMemorySupport",
    "CgroupPidsSupport",
    "CpuCgroup",
    "MemoryCgroup",
    "PidsCgroup",
    "ProcessLimits",
    "apply_rlimits",
    "bwrap_argv",
    "kill_process_group",
    "probe_host",
    "rlimit_preexec",
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
    "ArtifactLimitExceeded",
    "InvalidRequest",
    "CommandNotFound",
    "SandboxUnavailable",
    "SandboxCrashed",
    "SecretUnavailable",
    "validate_request",
    "required_limits",
    "check_enforceable",
    "run",
    # command runners
    "LocalProcessSandbox",
    "BubblewrapSandbox",
    "WORKDIR",
    # the CodeExecutor port
    "CodeExecutor",
    "CodeExecutorService",
    "CodeExecutionHost",
    "CodeExecutionHostService",
    "CodeExecutionRequest",
    "CodeExecutionLimits",
    "CodeExecutionResult",
    "LogLine",
    "LogLevel",
    "HostCallOutcome",
    "HostCallSucceeded",
    "HostCallFailed",
    "host_layer",
    "execute_in",
    "LIMIT_SOURCE",
    "LIMIT_RESULT",
    "LIMIT_HOST_CALLS",
    "LIMIT_HOST_CALL_ARGUMENT",
    "LIMIT_HOST_CALL_RESULT",
    "LIMIT_JSON_DEPTH",
    "MAX_JSON_DEPTH",
    # CodeExecutor errors
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
    "InvalidHostResult",
    "ProgramThrew",
    "ExecutorCrashed",
    "ExecutorUnavailable",
    "CodeLimitNotEnforceable",
    # the Deno executor
    "DenoCodeExecutor",
    "open_deno_executor",
    "deno_executor_layer",
    "DENO_MIN_PROCESSES",
]

"""Code Mode (spec §9.1, CAP-014, CAP-016): one tool that runs a model-written JavaScript program
over an explicit allowlist of tools, in an isolated pass of the CodeExecutor.

:func:`code_mode` builds it from the selected tools under namespaces: an ordinary readonly
:class:`~effectagent.Tool` (its one parameter is the program, its description how to write one,
followed by TypeScript declarations of the namespaces) and the Layer of its handler. Inside the
program every call goes through the engine's broker; what the model gets back — the result,
console output, a thrown error — shares one byte budget and is redacted by the engine like any
tool result; intermediate results never leave the pass.
"""

from ._builder import CodeMode as CodeMode
from ._builder import ExecutorChoice as ExecutorChoice
from ._builder import code_mode as code_mode
from ._egress import CodeModeOutput as CodeModeOutput
from ._errors import CodeModeBuildError as CodeModeBuildError
from ._errors import CodeModeFailed as CodeModeFailed
from ._errors import ExecutorNotIsolated as ExecutorNotIsolated
from ._errors import FailureKind as FailureKind
from ._errors import NameCollision as NameCollision
from ._errors import ToolCallsTools as ToolCallsTools
from ._errors import ToolNeedsApproval as ToolNeedsApproval
from ._errors import ToolNotReadonly as ToolNotReadonly
from ._errors import UnrenderableSchema as UnrenderableSchema
from ._limits import CodeModeLimits as CodeModeLimits
from ._pass import CodeModeInput as CodeModeInput

__all__ = [
    "CodeMode",
    "CodeModeBuildError",
    "CodeModeFailed",
    "CodeModeInput",
    "CodeModeLimits",
    "CodeModeOutput",
    "ExecutorChoice",
    "ExecutorNotIsolated",
    "FailureKind",
    "NameCollision",
    "ToolCallsTools",
    "ToolNeedsApproval",
    "ToolNotReadonly",
    "UnrenderableSchema",
    "code_mode",
]

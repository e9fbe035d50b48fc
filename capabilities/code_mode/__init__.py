"""Code Mode (CAP-014, CAP-016): one tool that runs a model-written JavaScript program
over an explicit allowlist of tools, in an isolated pass of the CodeExecutor.

:func:`code_mode` builds it from the selected tools under namespaces: an ordinary readonly
:class:`~effectagent.Tool` (its one parameter is the program, its description how to write one,
followed by TypeScript declarations of the namespaces) and the Layer of its handler. Inside the
program every call goes through the engine's broker; what the model gets back — the result,
console output, a thrown error — shares one byte budget and is redacted by the engine like any
tool result; intermediate results never leave the pass.

A tool that cannot be offered this way (not readonly, may need approval, calls tools itself, a
name collision, a schema TypeScript cannot show) is refused at construction with a
:class:`CodeModeBuildError` naming it and the reason; a pass that gives no result is a
:class:`CodeModeFailed` the model reads.
"""

from ._builder import CodeMode as CodeMode
from ._builder import code_mode as code_mode
from ._egress import CodeModeOutput as CodeModeOutput
from ._errors import CodeModeBuildError as CodeModeBuildError
from ._errors import CodeModeFailed as CodeModeFailed
from ._limits import CodeModeLimits as CodeModeLimits
from ._pass import CodeModeInput as CodeModeInput

__all__ = [
    "CodeMode",
    "CodeModeBuildError",
    "CodeModeFailed",
    "CodeModeInput",
    "CodeModeLimits",
    "CodeModeOutput",
    "code_mode",
]

"""Code Mode (spec §9.1, CAP-014, CAP-016): one tool that runs a model-written JavaScript program
over an explicit allowlist of tools, in an isolated pass of the CodeExecutor.

So far: the allowlist's checks and the TypeScript declarations of the selected tools.
"""

from ._errors import CodeModeBuildError as CodeModeBuildError
from ._errors import NameCollision as NameCollision
from ._errors import ToolNeedsApproval as ToolNeedsApproval
from ._errors import ToolNotReadonly as ToolNotReadonly
from ._errors import UnrenderableSchema as UnrenderableSchema

__all__ = [
    "CodeModeBuildError",
    "NameCollision",
    "ToolNeedsApproval",
    "ToolNotReadonly",
    "UnrenderableSchema",
]

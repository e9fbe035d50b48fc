"""Approval providers for the engine's ``ApprovalService``: by policy rules, by a person
through a UI, or by a script in tests. The engine records every request and decision (CAP-006),
binds each decision to its call and treats a timeout as a denial; these providers decide.

* :class:`PolicyApproval` — rules over tool, agent, risk, targets, annotations and the decoded
  parameters; first match wins; default deny; ``"ask"`` hands a request to another provider.
* :class:`InteractiveApproval` — requests wait for a person: a UI subscribes to a channel (or
  gives a callback) and answers by approval ID, several pending at once, in any order; a
  cancelled request is withdrawn from every UI.
* :class:`ScriptedApproval` — answers from a script, on the Trio clock, for tests.
* :class:`SuspendingApproval` — answers that the decision comes later: the run suspends durably
  (``RunSuspended``) and ``Runtime.resume`` continues it once decisions are in the log. Behind a
  :class:`PolicyApproval` (``ask=SuspendingApproval()``), the rules decide what they can at once.
"""

from ._interactive import InteractiveApproval as InteractiveApproval
from ._pending import ApprovalClosed as ApprovalClosed
from ._pending import ApprovalNotPending as ApprovalNotPending
from ._pending import ApprovalOpened as ApprovalOpened
from ._pending import ApprovalUpdate as ApprovalUpdate
from ._pending import PendingApproval as PendingApproval
from ._policy import PolicyApproval as PolicyApproval
from ._rules import ApprovalPolicy as ApprovalPolicy
from ._rules import ApprovalRule as ApprovalRule
from ._rules import ApprovalSubject as ApprovalSubject
from ._rules import Decision as Decision
from ._rules import Known as Known
from ._rules import Parameters as Parameters
from ._rules import Unknown as Unknown
from ._rules import Verdict as Verdict
from ._scripted import Answer as Answer
from ._scripted import ScriptedApproval as ScriptedApproval
from ._subject import ToolRegistry as ToolRegistry
from ._suspending import SuspendingApproval as SuspendingApproval

__all__ = [
    "Answer",
    "ApprovalClosed",
    "ApprovalNotPending",
    "ApprovalOpened",
    "ApprovalPolicy",
    "ApprovalRule",
    "ApprovalSubject",
    "ApprovalUpdate",
    "Decision",
    "InteractiveApproval",
    "Known",
    "Parameters",
    "PendingApproval",
    "PolicyApproval",
    "ScriptedApproval",
    "SuspendingApproval",
    "ToolRegistry",
    "Unknown",
    "Verdict",
]

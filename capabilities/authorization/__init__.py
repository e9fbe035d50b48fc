"""Tool authorization: which tools each caller's runs may use, by allow and deny
rules keyed by agent, tool and principal — deny overrides allow, the default decides the rest, and
a refusal is a ``ToolRejected`` whose reason the model reads."""

from ._access import AccessDecision as AccessDecision
from ._access import AccessPolicy as AccessPolicy
from ._access import AccessRule as AccessRule
from ._access import AccessSubject as AccessSubject
from ._access import Effect as Effect
from ._provider import PolicyAuthorization as PolicyAuthorization

__all__ = [
    "AccessDecision",
    "AccessPolicy",
    "AccessRule",
    "AccessSubject",
    "Effect",
    "PolicyAuthorization",
]

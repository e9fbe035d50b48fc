"""Testing support shipped to users: a scripted model, hypothesis strategies, clock helpers."""

from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptExhausted as ScriptExhausted
from ._scripted import Turn as Turn
from ._scripted import UnconsumedScript as UnconsumedScript

__all__ = ["ScriptExhausted", "ScriptedModel", "Turn", "UnconsumedScript"]

"""Why a run is refused before it starts — nothing is written then."""

from __future__ import annotations

__all__ = [
    "ConversationBusy",
    "ConversationEvicted",
    "ConversationExists",
    "InstructionsLeakSecret",
    "UnknownConversation",
]


class ConversationBusy(RuntimeError):
    """A run of this conversation is already going in this runtime.

    Two runs of one conversation at once would interleave their records and each would build its
    prompts from a history the other is still writing; the second is refused before it starts.
    To add input to a running run, steer it (``capabilities.steering``); to run again, wait for
    the run to end. Runtimes in other processes sharing a log are not seen.
    """

    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            f"conversation {conversation_id!r} already has a run going in this runtime; steer "
            "that run or wait for it to end"
        )
        self.conversation_id = conversation_id


class UnknownConversation(LookupError):
    """A run was asked to continue a conversation that has no history in the runtime's log.

    Continuing and creating are different intents: a mistyped or expired ID must not silently
    start a fresh conversation. To start one under an ID of your choosing, pass ``create=True``.
    Raised before the run starts; nothing is written.
    """

    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            f"conversation {conversation_id!r} has no history to continue; to start a new "
            "conversation under this ID, pass create=True"
        )
        self.conversation_id = conversation_id


class ConversationEvicted(UnknownConversation):
    """A run was asked to continue a conversation the runtime's in-memory log no longer has: its
    retention (``LogRetention``: a cap on conversations and on bytes) evicted it, least recently
    used first, while it was idle. Its history is gone; start a new conversation (or use
    ``sqlite_storage`` for history that lasts). An ``UnknownConversation``, so code that handles
    that handles this; raised before the run starts, and nothing is written.
    """

    def __init__(self, conversation_id: str) -> None:
        LookupError.__init__(
            self,
            f"conversation {conversation_id!r} was evicted from the in-memory log by its "
            "retention limits (least recently used first) and its history is gone; start a new "
            "conversation, or keep history in sqlite_storage",
        )
        self.conversation_id = conversation_id


class ConversationExists(ValueError):
    """A run was asked to create a conversation (``create=True``) under an ID that already has
    history. Raised before the run starts; nothing is written."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            f"conversation {conversation_id!r} already exists; continue it without create=True"
        )
        self.conversation_id = conversation_id


class InstructionsLeakSecret(ValueError):
    """An agent's instructions contain something the runtime's Redactor removes — or what else
    every run of it sends as written does: a tool's name, description or parameter schema and
    the output type's schema (in every model request), the agent's name (in every event)
    — ``part`` says which; None: the instructions.

    Instructions are the first message of every prompt, so a secret in them would reach the model
    on every request; rather than send it, or silently send instructions other than the ones
    written, the runtime refuses the agent when it is preflighted.
    """

    def __init__(self, agent: str, part: str | None = None) -> None:
        if part is None:
            super().__init__(
                f"agent {agent!r}: its instructions contain a value the Redactor removes (a "
                "registered secret); keep secrets out of instructions and give them to tools "
                "instead"
            )
        else:
            super().__init__(
                f"agent {agent!r}: {part} contains a value the Redactor removes (a registered "
                "secret), and every run would send it as written (to the model, or in its "
                "events); keep secrets out of it"
            )
        self.agent = agent
        self.part = part

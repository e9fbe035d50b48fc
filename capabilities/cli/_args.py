"""The ``effectagent`` command's arguments, help and exit statuses.

Light on purpose: ``effectagent --help`` and ``--version`` are answered from this module and the
standard library alone; the engine, the providers and the tools are imported only once a command
runs (``_main``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._admin_args import admin as _admin
from ._admin_args import worker as _worker
from ._serve_args import serve as _serve

__all__ = [
    "SUBCOMMANDS",
    "EXIT_COMPLETED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_SUSPENDED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "parse",
    "prompt_text",
    "readable",
]

#: The run completed (chat: the session ended).
EXIT_COMPLETED = 0
#: The run failed: the model, a tool or a budget ended it with an error.
EXIT_FAILED = 1
#: Bad arguments or configuration, or no model configured.
EXIT_USAGE = 2
#: The model, tools or storage could not be opened (a missing API key, an MCP server that does
#: not answer, no bubblewrap for the shell tool, …).
EXIT_UNAVAILABLE = 3
#: The run was suspended: it waits on a decision that comes later (the command's own approvals
#: are asked inline, so its runs do not suspend; a durable worker's may).
EXIT_SUSPENDED = 4
#: The run was interrupted: the shell's convention for "ended by SIGINT".
EXIT_INTERRUPTED = 130

_EXIT_CODES = f"""\
exit status:
  {EXIT_COMPLETED}    the run completed (chat: the session ended)
  {EXIT_FAILED}    the run failed (the model, a tool or a budget ended it with an error)
  {EXIT_USAGE}    bad arguments or configuration, or no model configured
  {EXIT_UNAVAILABLE}    the model, tools or storage could not be opened
  {EXIT_SUSPENDED}    the run was suspended: it waits on a decision that comes later
  {EXIT_INTERRUPTED}  the run was interrupted (Ctrl-C)
  143  stopped by SIGTERM (129: SIGHUP, the terminal closed): chat and run interrupt the run
       going first, as Ctrl-C does
"""

#: Under each subcommand's help: the exit statuses, and where the rest is.
_SHORT_EPILOG = (
    _EXIT_CODES + "\n`effectagent --help` describes the config file and the environment.\n"
)

#: Under ``effectagent --help`` only.
_LONG_EPILOG = (
    _EXIT_CODES
    + """
config file (TOML; every table optional, unknown keys are errors):
  storage = "postgresql://USER@HOST/DATABASE"   storage_schema = "effectagent"
               (top level, before any table: one PostgreSQL database that every machine's
               effectagent shares; default: SQLite in the state directory)
  [model]      name = "anthropic:claude-sonnet-4-5"   base_url = "…"   api_key_env = "VAR"
  [agent]      instructions = "…"   max_turns = 20   max_tool_calls = 64   max_duration = 600
               approval_timeout = 300
  [shell]      workspace = "."   write = true   network = false   timeout = 30
               (shell: sandboxed, workspace read-only at /workspace; shell_write: asks first,
               read-write)
  [code_mode]  executor = "deno"        (run_program over the readonly tools)
  [[mcp]]      name = "notes"   command = "python"   args = ["server.py"]   (or url = "http://…")
               approval = "unless-readonly"   (or "always", "never"; a url: "always" by default)
               prefix = true   (tools named notes_<tool>; false, or a prefix of your own)
  [skills]     paths = ["~/skills"]
  [compaction] context_tokens = 100000   keep_recent_tokens = 20000   summary_tokens = 2048
               strategy = "prune-then-summarize"   (or "prune-only"; in a chat /compact runs it)
  [prices."anthropic:claude-sonnet-4-5"]   input = 3.0   output = 15.0   cached = 0.3
               cache_write = 3.75   (US dollars per million tokens: the cost /usage shows)

environment:
  EFFECTAGENT_MODEL   the model when --model is not given
  EFFECTAGENT_STORAGE a PostgreSQL URL: sessions, conversations and durable submissions live
                      there, whatever the config file's storage says
  EFFECTAGENT_STORAGE_SCHEMA
                      the PostgreSQL schema, whatever the config file's storage_schema says
  XDG_STATE_HOME      sessions live in $XDG_STATE_HOME/effectagent/ (else ~/.local/state/effectagent/),
                      a directory only you may read (0700), unless a PostgreSQL storage is named
  XDG_CONFIG_HOME     the config file is $XDG_CONFIG_HOME/effectagent/config.toml (else ~/.config/…)
  NO_COLOR            no colors (as --color never)
"""
)


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kwargs.get("help")
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("effectagent")
        except PackageNotFoundError:  # run from a checkout that was never installed
            number = "unknown (not installed)"
        sys.stdout.write(f"effectagent {number}\n")
        parser.exit()


def _subcommand(
    commands: Any, name: str, *, parents: list[argparse.ArgumentParser], **kwargs: Any
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        parents=parents,
        epilog=_SHORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
    return parser


def _common(*, session: bool = True) -> argparse.ArgumentParser:
    """The options of every command that opens a model (``session``: with ``--session``, which
    ``serve`` has no use for — each submission names its conversation — and so refuses)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--model",
        help="PROVIDER:MODEL — openai:…, openai-chat:…, anthropic:…, google:… (Gemini), "
        "openai-compatible:… (with --base-url); default $EFFECTAGENT_MODEL, else [model] name in the config",
    )
    common.add_argument(
        "--base-url", help="the provider's API root (required for openai-compatible)"
    )
    common.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="the environment variable holding the API key (default: the provider's usual one)",
    )
    common.add_argument(
        "--media",
        metavar="KINDS",
        help="what the model takes besides text, comma-separated: image, document, audio, or "
        "none (default: what the providers guide's table says of the model; an "
        "openai-compatible server's model is taken to read text only)",
    )
    common.add_argument("--config", metavar="PATH", help="the TOML config (tools, agent, model)")
    common.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where sessions are kept (default: the XDG state dir), unless a PostgreSQL storage "
        "is named ($EFFECTAGENT_STORAGE, or the config's storage)",
    )
    if session:
        common.add_argument(
            "--session", metavar="NAME", help="continue the session NAME (created when new)"
        )
    common.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="default: auto"
    )
    return common


_STATE_DIR_HELP = (
    "where sessions are kept (unless a PostgreSQL storage is named: $EFFECTAGENT_STORAGE, or the "
    "config's storage)"
)
_CONFIG_HELP = (
    "the TOML config: its storage (export: its [agent] instructions too; default: the XDG "
    "config file)"
)


def _state_dir(parser: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """``--state-dir`` and ``--config`` (which may name a PostgreSQL storage); ``nested`` under
    an action, where they do not hide the command's own."""
    default = argparse.SUPPRESS if nested else None
    parser.add_argument("--state-dir", metavar="DIR", default=default, help=_STATE_DIR_HELP)
    parser.add_argument("--config", metavar="PATH", default=default, help=_CONFIG_HELP)


def _chat(commands: Any, common: argparse.ArgumentParser) -> None:
    _subcommand(
        commands,
        "chat",
        parents=[common],
        help="an interactive session (Ctrl-C interrupts a run, Ctrl-D ends the session)",
        description="An interactive session: type a prompt, watch the run; text typed while a "
        "run goes steers it; approvals are asked inline (y / n / a = always this session). "
        "Ctrl-C interrupts the run, Ctrl-D ends the session; /help lists the chat's commands "
        "(/model, /sessions, /resume, /compact, /usage …). A new session gets a name to "
        "resume it with --session.",
    )


def _run(commands: Any, common: argparse.ArgumentParser) -> None:
    run = _subcommand(
        commands,
        "run",
        parents=[common],
        help="one run: print the answer; the exit status says how it ended",
        description="One run of PROMPT: the answer goes to stdout, tool calls and usage to "
        "stderr (or every event as one JSON object per line with --json). PROMPT `-` reads the "
        "prompt from stdin; with another PROMPT, text piped to stdin follows it in the prompt "
        '(`git diff | effectagent run "review this"`). The conversation is saved as a session '
        "(a new one is named on stderr); --session NAME continues one.",
    )
    run.add_argument("prompt", help="what to ask (`-`: read it from stdin)")
    run.add_argument(
        "--attach",
        metavar="FILE",
        action="append",
        default=[],
        help="send FILE with the prompt: an image (PNG, JPEG, GIF, WebP), a PDF or text "
        "document, or audio (WAV, MP3, FLAC, Ogg), its type read from its bytes; repeatable",
    )
    run.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    run.add_argument(
        "--record",
        metavar="FILE",
        help="write every model request and response of the run to FILE, a cassette (redacted) "
        "that effectagent.testing.ReplayModel replays offline",
    )


def _sessions(commands: Any, common: argparse.ArgumentParser) -> None:
    sessions = _subcommand(
        commands,
        "sessions",
        parents=[],
        help="list the sessions (or show, export or delete one)",
        description="List the sessions: name, conversation, last update, runs. "
        "`sessions show NAME` prints one's conversation; "
        "`sessions export NAME --cassette FILE` writes one as a cassette; "
        "`sessions delete NAME` deletes one (after asking).",
    )
    _state_dir(sessions)
    actions = sessions.add_subparsers(dest="sessions_command", metavar="ACTION")
    show = _subcommand(
        actions,
        "show",
        parents=[],
        help="print a session's conversation",
        description="Print what was said in the conversation the session NAME continues (its "
        "latest): your messages and the answers, without the tool calls.",
    )
    show.add_argument("name", metavar="NAME", help="the session")
    _state_dir(show, nested=True)
    export = _subcommand(
        actions,
        "export",
        parents=[],
        help="write a session's conversation as a cassette",
        description="Write the conversation of the session NAME (its latest) as a cassette: each "
        "model response with its request rebuilt from the log, for "
        "effectagent.testing.ReplayModel. The log keeps no tool set and no streaming chunks: a "
        "replay does not check the tools offered, and each text block is one delta.",
    )
    export.add_argument("name", metavar="NAME", help="the session")
    export.add_argument("--cassette", metavar="FILE", required=True, help="the cassette to write")
    _state_dir(export, nested=True)
    delete = _subcommand(
        actions,
        "delete",
        parents=[],
        help="delete a session (asks first)",
        description="Delete the session NAME (every session of that name), after asking on "
        "the terminal, with its conversations (their records, search index and media) unless "
        "another session lists them. A session whose conversation has a run going is not "
        "deleted.",
    )
    delete.add_argument("name", metavar="NAME", help="the session")
    delete.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    _state_dir(delete, nested=True)


def _history(commands: Any, common: argparse.ArgumentParser) -> None:
    history = _subcommand(
        commands,
        "history",
        parents=[],
        help="search what was said in every stored conversation",
        description="The newest messages — yours and the answers — that hold every word of "
        "SEARCH (case-insensitive), from every stored conversation, one a line with when, "
        "where and an excerpt.",
    )
    history.add_argument("search", nargs="+", metavar="SEARCH", help="the words to look for")
    history.add_argument(
        "--limit", type=int, default=20, metavar="N", help="show at most N messages (20)"
    )
    _state_dir(history)
    history.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="default: auto"
    )


#: The subcommands, in the order ``--help`` lists them: each adds its parser to the
#: subparsers it is given (with the options of every command that opens a model). A new
#: subcommand is a function here and a line in ``_main``'s ``COMMANDS``.
SUBCOMMANDS: list[Callable[[Any, argparse.ArgumentParser], None]] = [
    _chat,
    _run,
    _sessions,
    _history,
    _admin,
    _worker,
    _serve,
]


def parser() -> argparse.ArgumentParser:
    """The command's argument parser."""
    top = argparse.ArgumentParser(
        prog="effectagent",
        description="Talk to an LLM agent in the terminal: tools run in a sandbox, writes ask "
        "first, sessions persist in SQLite (or a PostgreSQL database that many machines share).",
        epilog=_LONG_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action=_Version, help="print the version and exit")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common, sessionless = _common(), _common(session=False)
    for register in SUBCOMMANDS:
        register(commands, sessionless if register is _serve else common)
    return top


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The parsed arguments (``--help``, ``--version`` and bad arguments exit, as argparse
    does: status 0, 0 and 2)."""
    return parser().parse_args(argv)


def _tag(piped: str) -> str:
    """``stdin``, or ``stdin-2``, ``stdin-3``… — the first whose closing tag the piped text does
    not hold, so that the block ends where the command ended it."""
    tag, number = "stdin", 1
    while f"</{tag}>" in piped:
        number += 1
        tag = f"stdin-{number}"
    return tag


def prompt_text(argument: str, piped: str | None) -> str:
    """The prompt of ``effectagent run``: ``argument``; with ``-``, what was piped to stdin;
    otherwise, text piped to stdin follows the argument inside ``<stdin>`` … ``</stdin>`` (a tag
    the piped text does not close, so the block cannot be ended early by what it holds). Bytes of
    the argument that were not UTF-8 read as U+FFFD, as piped ones do (:func:`readable`)."""
    if argument == "-":
        return piped or ""
    argument = readable(argument)
    if piped is None or not piped.strip():
        return argument
    tag = _tag(piped)
    return f"{argument}\n\n<{tag}>\n{piped.removesuffix(chr(10))}\n</{tag}>"


def readable(text: str) -> str:
    """``text`` as it can be sent: each lone surrogate — what bytes that were not UTF-8 become
    in ``sys.argv`` (``surrogateescape``) — replaced by U+FFFD, as ``bytes.decode(errors=
    "replace")`` does for stdin; text without one is returned as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no undecodable byte makes
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace")

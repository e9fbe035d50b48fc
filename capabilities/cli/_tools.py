"""The tools a configuration offers: the sandboxed shell, Code Mode over the readonly tools, MCP
servers and skills — as tools, the Layer of their handlers and the tool sources an agent names."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs

from capabilities.code_mode import CodeModeBuildError, code_mode
from capabilities.mcp import HttpServer, McpConnection, McpServer, StdioServer, connect
from capabilities.skills import activation_tool, discover_skills
from effectagent import Tool, Toolkit, tool
from effectagent.ai import ToolAnnotations, ToolSource
from effectagent.effect import Layer, ServiceKey, TaggedError
from sandbox import (
    BubblewrapSandbox,
    Mount,
    MountMode,
    NetworkPolicy,
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxRequest,
    run,
)

from ._config import Config, ConfigError, McpConfig, ShellConfig
from ._reach import SandboxUser, workspace_reach

__all__ = ["ShellError", "ShellResult", "Tooling", "open_tools", "shell_tools"]

#: Where the workspace appears inside the sandbox (and the commands' working directory).
WORKSPACE = "/workspace"
#: The names of Code Mode's tool and the skills' activation tool.
PROGRAM = "run_program"
ACTIVATE = "activate_skill"


@attrs.frozen
class ShellResult:
    """What a command did: its exit status and the head of its output."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_truncated: bool = False


@attrs.frozen
class ShellError(TaggedError):
    """The sandbox could not run the command (``message`` says why)."""

    message: str


def shell_tools(config: ShellConfig, sandbox: Sandbox) -> tuple[Tool[Any, Any], ...]:
    """``shell`` (readonly: the workspace is mounted read-only), and with ``write`` also
    ``shell_write`` (asks for approval; the workspace is mounted read-write)."""
    workspace = str(config.workspace)
    # A command may use its whole time on the CPU: the sandbox's per-process CPU limit (30 s by
    # default) must not end it before its timeout does.
    limits = SandboxLimits(
        wall_clock_seconds=config.timeout,
        cpu_seconds=max(30.0, config.timeout),
    )
    network: NetworkPolicy = "host" if config.network else "none"

    async def execute(command: str, mode: MountMode) -> ShellResult:
        """Run ``command`` with ``/bin/sh -c`` in the sandbox.

        Cancellation: the sandbox kills and reaps the command before the cancellation goes on.
        """
        request = SandboxRequest(
            "/bin/sh",
            ("-c", command),
            mounts=(Mount(workspace, WORKSPACE, mode),),
            cwd=WORKSPACE,
            network=network,
            limits=limits,
        )
        try:
            result = await run(sandbox, request)
        except SandboxError as exc:
            raise ShellError(f"{exc.tag}: {exc}") from None
        return ShellResult(
            result.exit_code if result.signal is None else 128 + result.signal,
            result.stdout.decode("utf-8", "replace"),
            result.stderr.decode("utf-8", "replace"),
            result.timed_out,
            result.output_truncated,
        )

    where = (
        f"The workspace ({workspace} on the host) is the working directory, {WORKSPACE}. "
        f"Each command may run {config.timeout:g} s; "
        + ("it may use the network." if config.network else "there is no network.")
    )

    @tool(
        name="shell",
        description="Run a command line with /bin/sh -c in a sandbox, the workspace mounted "
        "read-only: for reading and inspecting files, never for changing them"
        + (" (use shell_write for that). " if config.write else ". ")
        + where,
        errors=ShellError,
        readonly=True,
        open_world=config.network,
    )
    async def shell(command: str) -> ShellResult:
        """Args:
        command: The command line, run by /bin/sh -c.
        """
        return await execute(command, "ro")

    if not config.write:
        return (shell,)

    @tool(
        name="shell_write",
        description="Run a command line with /bin/sh -c in a sandbox, the workspace mounted "
        "read-write: for commands that change files. The user approves each command first. "
        + where,
        errors=ShellError,
        needs_approval=True,
        summarize=lambda args: f"run in the workspace, read-write: {args.command}",
        targets=lambda args: [f"workspace:{workspace}"],
        open_world=config.network,
    )
    async def shell_write(command: str) -> ShellResult:
        """Args:
        command: The command line, run by /bin/sh -c.
        """
        return await execute(command, "rw")

    return (shell, shell_write)


@attrs.frozen
class Tooling:
    """What the configuration offers an agent: ``tools`` for its toolkit, ``layer`` binding
    their handlers, ``sources`` (MCP servers) for ``Agent(tool_sources=...)``; ``origin`` says
    where a tool comes from by its registered name, ``notes`` what a person should know (an MCP
    server's tool left out because its name is taken)."""

    tools: tuple[Tool[Any, Any], ...] = ()
    layer: Layer | None = None
    sources: tuple[ServiceKey[ToolSource], ...] = ()
    origin: Callable[[str], str] = attrs.field(default=lambda name: "a tool of this session")
    notes: tuple[str, ...] = ()

    @property
    def may_need_approval(self) -> bool:
        """Whether any tool, or any MCP server's tool, may ask for approval."""
        return bool(self.sources) or any(t.needs_approval is not False for t in self.tools)


def _approval(choice: str) -> bool | Callable[[ToolAnnotations], bool]:
    if choice == "always":
        return True
    if choice == "never":
        return False
    return lambda annotations: not annotations.readonly


def _server(config: McpConfig) -> McpServer:
    if config.url is not None:
        return HttpServer(
            config.url,
            name=config.name,
            prefix=config.tool_prefix,
            needs_approval=_approval(config.approval),
        )
    assert config.command is not None
    return StdioServer(
        config.command,
        config.args,
        env=dict(config.env) or None,
        cwd=config.cwd,
        name=config.name,
        prefix=config.tool_prefix,
        needs_approval=_approval(config.approval),
    )


class _Origins:
    """Where each tool comes from, by its registered name, in the engine's order: the agent's
    own tools first, then each MCP server's as it lists them now (a name taken earlier is left
    out, as the engine leaves it out)."""

    def __init__(self) -> None:
        self.own: dict[str, str] = {}
        self.servers: list[tuple[str, McpConnection]] = []

    def __call__(self, tool_name: str) -> str:
        own = self.own.get(tool_name)
        if own is not None:
            return own
        for name, connection in self.servers:
            if any(tool.name == tool_name for tool in connection.tools):
                return f"MCP server {name!r}"
        return "a tool of this session"

    def left_out(self, name: str, connection: McpConnection) -> list[str]:
        """What ``connection`` offers under a name taken before it (by our tools or an earlier
        server), as notes."""
        taken = set(self.own) | {t.name for _, c in self.servers for t in c.tools}
        return [
            f"MCP server {name!r}: its tool {tool.name!r} is left out, the name is taken "
            f"by {self(tool.name)} (set prefix in its [[mcp]] table)"
            for tool in connection.tools
            if tool.name in taken
        ]


def _offerable(tool: Tool[Any, Any]) -> bool:
    """Whether Code Mode may call ``tool``: readonly, never asking for approval, calling no tools
    itself, and with a schema it can declare."""
    if not tool.annotations.readonly or tool.needs_approval is not False or tool.inner_tools:
        return False
    try:
        code_mode({"check": [tool]}, executor="service")
    except CodeModeBuildError:
        return False
    return True


def _namespace(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"_{cleaned}"


@asynccontextmanager
async def open_tools(config: Config) -> AsyncIterator[Tooling]:
    """The configuration's tools, for the block: MCP servers are connected (their processes
    stopped when the block is left), skills discovered, the sandbox probed.

    Code Mode's ``run_program`` calls the readonly tools: ``workspace.shell`` and, under each
    MCP server's name, that server's readonly tools as it listed them when it connected — those
    it runs without asking, which a server over the network only does when its ``approval`` is
    set so in the configuration (its ``readOnlyHint`` alone is its own claim).

    Raises ``SandboxUnavailable`` when the shell is configured and bubblewrap cannot run here,
    ``McpConnectError`` for a server that does not answer, ``SkillError`` for a broken skill,
    :class:`ConfigError` for Code Mode without a readonly tool to offer.

    Cancellation: connecting is cancellable; leaving the block closes every connection
    (shielded, bounded).
    """
    tools: list[Tool[Any, Any]] = []
    layers: list[Layer] = []
    namespaces: dict[str, list[Tool[Any, Any]]] = {}
    origins = _Origins()
    notes: list[str] = []
    shell = config.shell
    if shell is not None:
        reach = workspace_reach(
            str(shell.workspace), SandboxUser.of_this_process(), write=shell.write
        )
        note = reach.note(write=shell.write)
        if note is not None:
            notes.append(note)
        shell = attrs.evolve(shell, write=reach.write) if reach.read else None
    if shell is not None:
        shells = shell_tools(shell, BubblewrapSandbox())
        tools.extend(shells)
        layers.append(Toolkit(*shells).handlers())  # each function tool brings its handler
        namespaces["workspace"] = [t for t in shells if _offerable(t)]
        origins.own.update((t.name, "built in: the sandboxed shell") for t in shells)
    if config.code_mode is not None:
        origins.own[PROGRAM] = "Code Mode"
    if config.skills:
        origins.own[ACTIVATE] = "built in: skills"
    if config.mcp:
        # The MCP SDK, imported here, where its absence is said as a missing package with its
        # install line (a connection would report it as one server's failure to start).
        importlib.import_module("mcp")
    async with AsyncExitStack() as stack:
        sources: list[ServiceKey[ToolSource]] = []
        for server_config in config.mcp:
            server = _server(server_config)
            connection = await stack.enter_async_context(connect(server))
            layers.append(connection.layer())
            sources.append(server.key)
            notes.extend(origins.left_out(server.name, connection))
            origins.servers.append((server.name, connection))
            if config.code_mode is not None:
                offered = [t for t in connection.tools if _offerable(t)]
                if offered:
                    namespaces[_namespace(server.name)] = offered
                    layers.append(Toolkit(*offered).handlers())  # as Code Mode calls them
        if config.code_mode is not None:
            selected = {name: listed for name, listed in namespaces.items() if listed}
            if not selected:
                why = (
                    notes[0]  # the shell is configured, and left out
                    if config.shell is not None and shell is None
                    else "configure [shell], or an MCP server with readonly tools"
                )
                raise ConfigError(
                    f"{config.path}: [code_mode] has no readonly tool to offer: {why}"
                )
            program = code_mode(selected, name=PROGRAM, executor=config.code_mode.executor)
            tools.append(program.tool)
            layers.append(program.layer)
        if config.skills:
            library = await discover_skills(*config.skills)
            activation = activation_tool(library, tools, name=ACTIVATE)
            tools.insert(0, activation.tool)
            layers.append(activation.layer)
        layer: Layer | None = None
        for part in layers:
            layer = part if layer is None else layer + part
        yield Tooling(tuple(tools), layer, tuple(sources), origins, tuple(notes))

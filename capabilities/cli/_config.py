"""The ``effectagent`` command's configuration file (TOML), validated strictly, and its paths.

Every key is known and typed: an unknown key, a value of the wrong type or an impossible value is a
:class:`ConfigError` naming the file and the key (``[shell] timeout``), never ignored. Pure, apart
from reading the file and the environment.

An example (every table is optional)::

    storage = "postgresql://ann@db.example/agents"  # default: SQLite in the state directory
    storage_schema = "effectagent"       # the PostgreSQL schema the tables live in

    [model]
    name = "openai-compatible:qwen3"     # used when --model and EFFECTAGENT_MODEL are absent
    base_url = "http://127.0.0.1:8000/v1"
    api_key_env = "MY_SERVER_KEY"        # the variable holding the key (default: the provider's)

    [agent]
    instructions = "You are a careful assistant."
    max_turns = 20
    max_tool_calls = 64
    max_duration = 600                   # seconds
    approval_timeout = 300               # seconds a prompt waits before it counts as a denial

    [shell]                              # the shell tool, in the bubblewrap sandbox
    workspace = "."                      # mounted read-only at /workspace (relative: to the file)
    write = true                         # also offer shell_write: asks first, mounts read-write
    network = false
    timeout = 30                         # seconds per command (at most 86400: a day)

    [code_mode]                          # one run_program tool over the readonly tools
    executor = "deno"                    # or "deno-unisolated"

    [[mcp]]
    name = "files"
    command = "python"                   # a server started over stdio …
    args = ["server.py"]
    # url = "http://127.0.0.1:9000/mcp"  # … or reached over streamable HTTP
    approval = "unless-readonly"         # or "always", "never" (default: "always" for a url)
    prefix = true                        # tools are files_<name>; false, or another prefix

    [skills]
    paths = ["~/skills"]

    [compaction]                         # compact a conversation whose context grows too long
    context_tokens = 100000              # the estimated context that starts a compaction
    keep_recent_tokens = 20000           # the newest part, kept word for word
    summary_tokens = 2048                # the longest summary
    strategy = "prune-then-summarize"    # or "prune-only"

    [prices."anthropic:claude-sonnet-4-5"]  # US dollars per million tokens, for /usage
    input = 3.0
    output = 15.0
    cached = 0.3                         # cache reads (default: the input price)
    cache_write = 3.75                   # cache writes (default: the input price)
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import unquote, urlsplit

import attrs

__all__ = [
    "AgentConfig",
    "CodeModeConfig",
    "CompactionConfig",
    "Config",
    "ConfigError",
    "McpConfig",
    "ModelConfig",
    "Price",
    "ShellConfig",
    "check_storage",
    "config_path",
    "config_secrets",
    "env_name_problem",
    "http_url_problem",
    "load_config",
    "readable_secrets_note",
    "state_dir",
]

McpApproval = Literal["always", "never", "unless-readonly"]

_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,32}$")

#: The PostgreSQL schema the command's tables live in, when ``storage_schema`` is not given.
DEFAULT_SCHEMA: Final = "effectagent"

#: A schema name the storage accepts (``capabilities.storage``'s rule, checked here without
#: importing the PostgreSQL driver; a test holds the two to the same answers).
_SCHEMA: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: The longest ``[shell] timeout``: the sandbox runs a command for at most a day
#: (``sandbox``'s rule for ``wall_clock_seconds``; a test holds the two to the same answers).
MAX_SHELL_SECONDS: Final = 86_400

#: How a storage URL starts: libpq reads these two prefixes (lower case) as a URL.
_STORAGE_SCHEMES: Final = ("postgresql://", "postgres://")


class ConfigError(Exception):
    """The configuration file cannot be used: the message names the file and the key."""


@attrs.frozen
class ModelConfig:
    """``[model]``."""

    name: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None


@attrs.frozen
class AgentConfig:
    """``[agent]``."""

    instructions: str | None = None
    max_turns: int = 20
    max_tool_calls: int = 64
    max_duration: float = 600.0
    approval_timeout: float = 300.0


@attrs.frozen
class ShellConfig:
    """``[shell]``: the workspace is an absolute host path."""

    workspace: Path
    write: bool = False
    network: bool = False
    timeout: float = 30.0


@attrs.frozen
class CodeModeConfig:
    """``[code_mode]``."""

    executor: Literal["deno", "deno-unisolated"] = "deno"


@attrs.frozen
class CompactionConfig:
    """``[compaction]``: the agent compacts its conversation when the estimated context passes
    ``context_tokens`` (and ``/compact`` does at once)."""

    context_tokens: int
    keep_recent_tokens: int = 20_000
    summary_tokens: int = 2048
    strategy: Literal["prune-then-summarize", "prune-only"] = "prune-then-summarize"


@attrs.frozen
class Price:
    """One ``[prices."MODEL"]`` table: US dollars per million tokens — ``input`` (uncached),
    ``output``, ``cached`` (cache reads; None: as ``input``), ``cache_write`` (None: as
    ``input``)."""

    input: float
    output: float
    cached: float | None = None
    cache_write: float | None = None


def _default_approval(server: McpConfig) -> McpApproval:
    """A server over the network is asked about every call: what it says of its tools
    (``readOnlyHint``) is its own claim. A command the configuration starts is trusted that far."""
    return "always" if server.url is not None else "unless-readonly"


def name_prefix(name: str) -> str:
    """The prefix a server's name gives its tools: letters, digits, ``_`` and ``-`` (anything
    else becomes ``_``), at most 32 characters."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:32] or "mcp"


@attrs.frozen
class McpConfig:
    """One ``[[mcp]]`` server: a ``command`` (stdio) or a ``url`` (streamable HTTP).

    ``approval`` defaults to ``"always"`` for a ``url``, ``"unless-readonly"`` for a ``command``.
    ``prefix``: True starts each of its tool names with the server's name (``notes_lookup``),
    False not at all, a string with that string.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: Path | None = None
    url: str | None = None
    approval: McpApproval = attrs.field(default=attrs.Factory(_default_approval, takes_self=True))
    prefix: bool | str = True

    @property
    def tool_prefix(self) -> str | None:
        """What starts each of its tool names (None: nothing)."""
        if self.prefix is True:
            return name_prefix(self.name)
        return self.prefix or None


@attrs.frozen
class Config:
    """The whole file (defaults when there is none). ``path`` is the file read, if any."""

    path: Path | None = None
    model: ModelConfig = ModelConfig()
    agent: AgentConfig = AgentConfig()
    shell: ShellConfig | None = None
    code_mode: CodeModeConfig | None = None
    mcp: tuple[McpConfig, ...] = ()
    skills: tuple[Path, ...] = ()
    compaction: CompactionConfig | None = None
    prices: Mapping[str, Price] = attrs.field(factory=dict)
    #: ``storage``: a PostgreSQL URL (None: the SQLite database in the state directory). It may
    #: hold a password: never shown (nor in this object's repr).
    storage: str | None = attrs.field(default=None, repr=False)
    storage_schema: str = DEFAULT_SCHEMA


# ---- paths ----------------------------------------------------------------------------------------


def _xdg(variable: str, fallback: str, environ: Mapping[str, str]) -> Path:
    value = environ.get(variable, "")
    if value and os.path.isabs(value):  # the spec: a relative value is ignored
        return Path(value)
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / fallback


def state_dir(given: str | None, environ: Mapping[str, str]) -> Path:
    """``given``, else ``$XDG_STATE_HOME/effectagent``, else ``~/.local/state/effectagent``."""
    if given:
        return Path(given).expanduser().resolve()
    return _xdg("XDG_STATE_HOME", ".local/state", environ) / "effectagent"


def config_path(given: str | None, environ: Mapping[str, str]) -> Path | None:
    """``given`` (which must exist), else ``$XDG_CONFIG_HOME/effectagent/config.toml`` (or
    ``~/.config/…``) when that file exists, else None."""
    if given:
        path = Path(given).expanduser()
        if path.is_dir():
            raise ConfigError(f"{given}: is a directory, not a configuration file (a TOML file)")
        if not path.is_file():
            raise ConfigError(f"{given}: no such configuration file")
        return path.resolve()
    default = _xdg("XDG_CONFIG_HOME", ".config", environ) / "effectagent" / "config.toml"
    return default if default.is_file() else None


# ---- validation -----------------------------------------------------------------------------------

_TYPE_NAMES: Final = {
    str: "a string",
    bool: "true or false",
    int: "an integer",
    float: "a number",
    list: "an array",
    dict: "a table",
}


def _kind(value: object) -> str:
    """What a TOML value is, for "got ..." (TOML gives these exact types, never subclasses)."""
    if type(value) is bool:
        return "a boolean"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


class _Table:
    """Reads the keys of one table, checking each one's type; :meth:`done` refuses the rest."""

    def __init__(self, file: Path, where: str, data: object) -> None:
        self.file = file
        self.where = where
        if not isinstance(data, dict):
            raise self.error(f"{where} must be a table, got {_kind(data)}")
        self.data: dict[str, Any] = data
        self.seen: set[str] = set()

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.file}: {message}")

    def name(self, key: str) -> str:
        return f"{self.where} {key}" if self.where else key

    def get(self, key: str, kind: type, default: Any = None) -> Any:
        self.seen.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        ok = (
            isinstance(value, int | float) and not isinstance(value, bool)
            if kind is float
            else isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        )
        if not ok:
            raise self.error(f"{self.name(key)} must be {_TYPE_NAMES[kind]}, got {_kind(value)}")
        return float(value) if kind is float else value

    def text(self, key: str, default: str | None = None) -> str | None:
        value: str | None = self.get(key, str, default)
        if value is not None and not value.strip():
            raise self.error(f"{self.name(key)} must not be empty")
        return value

    def positive(self, key: str, kind: type, default: float) -> Any:
        value = self.get(key, kind, default)
        if not math.isfinite(value) or value <= 0:  # nan and inf are TOML floats too
            raise self.error(f"{self.name(key)} must be a finite positive number, got {value}")
        return value

    def at_most(self, key: str, value: float, limit: float, why: str) -> None:
        """Refuse ``value`` of ``key`` above ``limit`` (``why``: what sets the limit)."""
        if value > limit:
            raise self.error(f"{self.name(key)} must be at most {limit:g} {why}, got {value:g}")

    def at_least_zero(self, key: str, kind: type, default: float | None) -> Any:
        value = self.get(key, kind, default)
        if value is not None and (not math.isfinite(value) or value < 0):
            raise self.error(f"{self.name(key)} must be a finite number ≥ 0, got {value}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        values = self.get(key, list, [])
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise self.error(f"{self.name(key)}[{index}] must be a string, got {_kind(value)}")
        return tuple(values)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> Any:
        value = self.get(key, str, default)
        if value not in choices:
            shown = ", ".join(repr(c) for c in choices)
            raise self.error(f"{self.name(key)} must be one of {shown}, got {value!r}")
        return value

    def path(self, key: str, default: str | None = None) -> Path | None:
        value = self.text(key, default)
        if value is None:
            return None
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.file.parent / path).resolve()

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            known = ", ".join(sorted(self.seen))
            raise self.error(
                f"unknown key {unknown[0]!r} in {self.where or 'the top level'} "
                f"(known keys: {known})"
            )


def check_storage(value: str) -> str | None:
    """What is wrong with ``value`` as a ``storage`` URL, as the end of a sentence that quotes
    no part of it (any part may be a password: a user's typo puts it anywhere) — but the name of
    a query parameter PostgreSQL does not take, when it reads as one — or None when nothing is.
    Pure (the query is read as libpq reads it, when the driver is installed)."""
    if not value.startswith(_STORAGE_SCHEMES):
        return (
            "must be a PostgreSQL URL, starting with postgresql:// or postgres:// as in "
            "postgresql://USER@HOST/DATABASE; leave it out to keep the SQLite database in the "
            "state directory"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "must not hold control characters or line breaks"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        return "is not a URL that can be read (its host or port, say): check how it is written"
    query = [piece.partition("=") for piece in parts.query.split("&")]
    passwords = [parts.netloc.rpartition("@")[0].partition(":")[2]]
    passwords += [setting for name, _, setting in query if unquote(name) == "password"]
    if any(0 < len(unquote(password)) < 4 for password in passwords):
        # Every password is kept out of what runs show, and one that short cannot be: it would
        # be found in ordinary text.
        return "has a password under 4 characters, too short to keep out of what runs show"
    return _query_problem(value)


def _query_problem(value: str) -> str | None:
    """What libpq refuses in the PostgreSQL URL ``value`` (the storage package's sentence), or
    None. Without the driver, None: opening says what to install."""
    try:
        from capabilities.storage._postgres import url_problem
    except ImportError:
        return None
    return url_problem(value)


def _storage(table: _Table) -> tuple[str | None, str]:
    """The top-level ``storage`` and ``storage_schema``."""
    url = table.text("storage")
    if url is not None:
        problem = check_storage(url)
        if problem is not None:
            raise table.error(f"storage {problem}")
    schema = table.text("storage_schema", DEFAULT_SCHEMA)
    assert schema is not None
    problem = check_storage_schema(schema)
    if problem is not None:
        raise table.error(f"storage_schema {problem}")
    return url, schema


def check_storage_schema(schema: str) -> str | None:
    """What is wrong with ``schema`` as a PostgreSQL schema name for the command's tables
    (the end of a sentence naming it: "must be a plain lower-case name …"), or None. Pure."""
    if not _SCHEMA.fullmatch(schema) or schema.startswith("pg_"):
        return (
            "must be a plain lower-case name of at most 63 letters, digits and "
            f"underscores, not starting with a digit or 'pg_', got {schema!r}"
        )
    return None


# [serve] is read by the serve command itself (``_serve.serve_settings``).
_TOP: Final = (
    "model",
    "agent",
    "shell",
    "code_mode",
    "mcp",
    "skills",
    "compaction",
    "prices",
    "serve",
)


#: An ``[[mcp]] env`` variable whose name says it holds a secret (``GITHUB_TOKEN``,
#: ``NOTES_API_KEY``, ``DB_PASSWORD``, ``CLIENT_SECRET``, ``AUTH_HEADER``, ``CREDENTIALS``…).
_SECRET_NAME: Final = re.compile(r"KEY|TOKEN|SECRET|PASSW|AUTH|CREDENTIAL", re.IGNORECASE)

#: The shortest value kept out of what is shown (a shorter one would mask ordinary text).
_SECRET_CHARS: Final = 4


def config_secrets(config: Config) -> tuple[str, ...]:
    """The secrets the configuration hands to tools: the value of each ``[[mcp]] env`` variable
    whose name says it is one (``…KEY``, ``…TOKEN``, ``…SECRET``, ``…PASSWORD``, ``…AUTH…``,
    ``…CREDENTIAL…``) and is at least four characters — kept out of what runs show and record,
    like the API key (a server that echoes its token shows ``[REDACTED]``)."""
    found = {
        value
        for server in config.mcp
        for name, value in server.env.items()
        if _SECRET_NAME.search(name) and len(value) >= _SECRET_CHARS
    }
    return tuple(sorted(found))


def _storage_password(url: str | None) -> bool:
    """Whether the storage URL carries a password (in its user part, or as a parameter)."""
    if url is None:
        return False
    userinfo = urlsplit(url).netloc.rpartition("@")[0] if "://" in url else ""
    return ":" in userinfo or "password=" in url.lower()


def readable_secrets_note(config: Config) -> str | None:
    """A note when the config file holds a secret (a password in ``storage``, an ``[[mcp]] env``
    secret as :func:`config_secrets` reads them) and users other than its owner may read it — as
    libpq says of a ``~/.pgpass`` others can read; None otherwise (or when it cannot be told)."""
    path = config.path
    if path is None or not (_storage_password(config.storage) or config_secrets(config)):
        return None
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return None
    if not mode & 0o077:
        return None
    what = "a password (storage)" if _storage_password(config.storage) else "an [[mcp]] env secret"
    return f"{path} holds {what} and other users may read it (mode {mode:04o}): `chmod 600 {path}`"


def load_config(path: Path | None) -> Config:
    """The configuration in ``path`` (defaults when None); raises :class:`ConfigError` naming
    the file and the key for anything it cannot use."""
    if path is None:
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: is not valid TOML: {exc}") from None
    top = _Table(path, "", data)
    for key in _TOP:
        top.seen.add(key)
    storage, storage_schema = _storage(top)
    top.done()
    return Config(
        path=path,
        model=_model(path, data.get("model", {})),
        agent=_agent(path, data.get("agent", {})),
        shell=_shell(path, data["shell"]) if "shell" in data else None,
        code_mode=_code_mode(path, data["code_mode"]) if "code_mode" in data else None,
        mcp=_mcp_servers(path, data.get("mcp", [])),
        skills=_skills(path, data.get("skills", {})),
        compaction=_compaction(path, data["compaction"]) if "compaction" in data else None,
        prices=_prices(path, data.get("prices", {})),
        storage=storage,
        storage_schema=storage_schema,
    )


def _model(path: Path, data: object) -> ModelConfig:
    table = _Table(path, "[model]", data)
    config = ModelConfig(table.text("name"), _http_url(table, "base_url"), _env_name(table))
    table.done()
    return config


#: An environment variable's name, as the shells write one.
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name_problem(value: str) -> str | None:
    """What is wrong with ``value`` as the name of an environment variable, or None. (The value
    is never quoted: what is given where a variable's name belongs is often the key itself.)"""
    if _ENV_NAME.fullmatch(value) is None:
        return (
            "must name an environment variable (letters, digits and _), not hold the key "
            "(the value given is not shown)"
        )
    return None


def http_url_problem(value: str) -> str | None:
    """What is wrong with ``value`` as an ``http://`` or ``https://`` URL, or None. (The value
    is never quoted: a URL may hold a password.)"""
    problem = "must be an http:// or https:// URL with a host"
    if not value.startswith(("http://", "https://")) or any(
        c.isspace() or unicodedata.category(c) in ("Cc", "Cs") for c in value
    ):
        return problem
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - a port that is not one (letters, past 65535) raises here
    except ValueError:
        return f"{problem} (and, if it has a port, one of digits up to 65535)"
    return None if host else problem


def _http_url(table: _Table, key: str) -> str | None:
    value = table.text(key)
    problem = None if value is None else http_url_problem(value)
    if problem is not None:
        raise table.error(f"{table.name(key)} {problem}")
    return value


def _env_name(table: _Table) -> str | None:
    value = table.text("api_key_env")
    problem = None if value is None else env_name_problem(value)
    if problem is not None:
        raise table.error(f"{table.name('api_key_env')} {problem}")
    return value


def _agent(path: Path, data: object) -> AgentConfig:
    table = _Table(path, "[agent]", data)
    config = AgentConfig(
        instructions=table.text("instructions"),
        max_turns=table.positive("max_turns", int, 20),
        max_tool_calls=table.positive("max_tool_calls", int, 64),
        max_duration=table.positive("max_duration", float, 600.0),
        approval_timeout=table.positive("approval_timeout", float, 300.0),
    )
    table.done()
    return config


def _shell(path: Path, data: object) -> ShellConfig:
    table = _Table(path, "[shell]", data)
    workspace = table.path("workspace", ".")
    assert workspace is not None
    config = ShellConfig(
        workspace=workspace,
        write=table.get("write", bool, False),
        network=table.get("network", bool, False),
        timeout=table.positive("timeout", float, 30.0),
    )
    table.at_most(
        "timeout", config.timeout, MAX_SHELL_SECONDS, "seconds (a day: the sandbox's longest)"
    )
    table.done()
    if not workspace.is_dir():
        raise ConfigError(f"{path}: [shell] workspace {str(workspace)!r} is not a directory")
    return config


def _code_mode(path: Path, data: object) -> CodeModeConfig:
    table = _Table(path, "[code_mode]", data)
    config = CodeModeConfig(table.choice("executor", ("deno", "deno-unisolated"), "deno"))
    table.done()
    return config


def _mcp_servers(path: Path, data: object) -> tuple[McpConfig, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"{path}: mcp must be an array of tables ([[mcp]]), got {_kind(data)}")
    servers = tuple(_mcp(path, index, item) for index, item in enumerate(data))
    names = [server.name for server in servers]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{path}: two [[mcp]] servers are named {name!r}")
    prefixes = [server.tool_prefix for server in servers if server.tool_prefix is not None]
    for prefix in prefixes:
        if prefixes.count(prefix) > 1:
            raise ConfigError(
                f"{path}: two [[mcp]] servers prefix their tools with {prefix!r}: give one "
                "another name or prefix"
            )
    return servers


def _mcp(path: Path, index: int, data: object) -> McpConfig:
    table = _Table(path, f"[[mcp]] #{index + 1}", data)
    name = table.text("name")
    command = table.text("command")
    url = _http_url(table, "url")
    if url is not None and "@" in urlsplit(url).netloc:  # the MCP client refuses it: say where
        raise table.error(
            f"{table.name('url')} must not hold credentials (user:password@host): it names the "
            "server in what the command shows"
        )
    args = table.strings("args")
    env_table = table.get("env", dict, {})
    env: dict[str, str] = {}
    for key, value in env_table.items():
        if not isinstance(value, str):
            raise table.error(f"{table.name('env')}.{key} must be a string, got {_kind(value)}")
        env[key] = value
    cwd = table.path("cwd")
    approval = (
        table.choice("approval", ("always", "never", "unless-readonly"), "always")
        if "approval" in table.data
        else None  # the default, by the kind of server
    )
    prefix = _prefix(table)
    table.done()
    if name is None:
        raise table.error(f"{table.where} needs a name")
    if (command is None) == (url is None):
        raise table.error(f"{table.where} ({name}) needs exactly one of command and url")
    if url is not None and (args or env or cwd is not None):
        raise table.error(f"{table.where} ({name}): args, env and cwd apply to a command only")
    server = McpConfig(name, command, args, env, cwd, url, prefix=prefix)
    return server if approval is None else attrs.evolve(server, approval=approval)


def _prefix(table: _Table) -> bool | str:
    """``prefix``: true (the default), false, or a prefix of 1-32 letters, digits, _ or -."""
    table.seen.add("prefix")
    value = table.data.get("prefix", True)
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise table.error(
            f"{table.name('prefix')} must be true, false or a string, got {_kind(value)}"
        )
    if not _PREFIX.match(value):
        raise table.error(
            f"{table.name('prefix')} must be 1-32 letters, digits, '_' or '-', got {value!r}"
        )
    return value


def _compaction(path: Path, data: object) -> CompactionConfig:
    table = _Table(path, "[compaction]", data)
    if "context_tokens" not in table.data:
        raise table.error("[compaction] needs context_tokens (the context that starts one)")
    config = CompactionConfig(
        context_tokens=table.positive("context_tokens", int, 1),
        keep_recent_tokens=table.at_least_zero("keep_recent_tokens", int, 20_000),
        summary_tokens=table.positive("summary_tokens", int, 2048),
        strategy=table.choice(
            "strategy", ("prune-then-summarize", "prune-only"), "prune-then-summarize"
        ),
    )
    table.done()
    return config


def _prices(path: Path, data: object) -> dict[str, Price]:
    tables = _Table(path, "[prices]", data)
    prices: dict[str, Price] = {}
    for model in tables.data:
        tables.seen.add(model)
        table = _Table(path, f"[prices.{model!r}]", tables.data[model])
        for needed in ("input", "output"):
            if needed not in table.data:
                raise table.error(f"{table.where} needs {needed} (dollars per million tokens)")
        prices[model] = Price(
            input=table.at_least_zero("input", float, 0.0),
            output=table.at_least_zero("output", float, 0.0),
            cached=table.at_least_zero("cached", float, None),
            cache_write=table.at_least_zero("cache_write", float, None),
        )
        table.done()
    return prices


def _skills(path: Path, data: object) -> tuple[Path, ...]:
    table = _Table(path, "[skills]", data)
    paths = table.strings("paths")
    table.done()
    resolved = []
    for value in paths:
        candidate = Path(value).expanduser()
        if not candidate.is_absolute():
            candidate = (path.parent / candidate).resolve()
        if not candidate.is_dir():
            raise ConfigError(f"{path}: [skills] paths: {value!r} is not a directory")
        resolved.append(candidate)
    return tuple(resolved)

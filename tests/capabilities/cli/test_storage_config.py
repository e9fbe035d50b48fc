"""Where the command keeps what it stores, decided without opening anything: the config file's
``storage`` and ``storage_schema``, validated strictly, ``EFFECTAGENT_STORAGE`` over them, and
the SQLite file in the state directory when neither names a PostgreSQL database.

A storage URL may carry a password: no refusal, no name of the store and no repr shows it (a
canary password here).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.cli._config import DEFAULT_SCHEMA, Config, ConfigError, load_config
from capabilities.cli._store import SCHEMA_VARIABLE, STORAGE_VARIABLE, Store, choose_store
from capabilities.storage._postgres_names import check_schema

from .support import cli_env

#: A made-up password: it must never show in what the command says.
CANARY = "pw-canary-5f3e9a"
URL = f"postgresql://ann:{CANARY}@db.example:5433/agents?sslmode=require"


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(config_file(tmp_path, text))
    message = str(caught.value)
    assert CANARY not in message
    assert message.startswith(f"{tmp_path / 'config.toml'}: ")
    return message


def test_without_storage_the_sqlite_file_in_the_state_directory_is_the_store(
    tmp_path: Path,
) -> None:
    config = load_config(config_file(tmp_path, '[model]\nname = "openai:gpt-4.1"\n'))
    assert (config.storage, config.storage_schema) == (None, DEFAULT_SCHEMA)
    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    store = choose_store(config, None, environ)
    assert store == Store(path=tmp_path / "state" / "effectagent" / "effectagent.db")
    assert store.missing
    assert store.name == str(tmp_path / "state" / "effectagent" / "effectagent.db")
    given = choose_store(config, str(tmp_path / "elsewhere"), environ)
    assert given.path == tmp_path / "elsewhere" / "effectagent.db"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_postgresql_url_is_the_store_named_without_its_password(
    tmp_path: Path, scheme: str
) -> None:
    url = URL.replace("postgresql", scheme, 1)
    config = load_config(
        config_file(tmp_path, f'storage = "{url}"\nstorage_schema = "team_a"\n[model]\n')
    )
    assert (config.storage, config.storage_schema) == (url, "team_a")
    store = choose_store(config, str(tmp_path / "state"), {})
    assert (store.url, store.schema, store.path) == (url, "team_a", None)
    assert not store.missing  # a database is known only by opening it
    assert store.name == f"{scheme}://ann@db.example:5433/agents?sslmode=require (schema team_a)"
    for shown in (repr(config), repr(store), store.name):
        assert CANARY not in shown
    # chat and run, the stored commands and the workers all open it through these Layers
    assert "postgres_storage" in repr(store.layer())
    assert "postgres_database" in repr(store.database_layer())
    sqlite = Store(path=tmp_path / "effectagent.db")
    assert "sqlite_storage" in repr(sqlite.layer())
    assert "sqlite_database" in repr(sqlite.database_layer())


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (f"mysql://ann:{CANARY}@db/agents", "must be a PostgreSQL URL"),
        (f"sqlite:///{CANARY}.db", "must be a PostgreSQL URL"),
        (f"POSTGRESQL://ann:{CANARY}@db/agents", "must be a PostgreSQL URL"),
        (f"host=db password={CANARY}", "must be a PostgreSQL URL"),
        (f"ann:{CANARY}@db/agents", "must be a PostgreSQL URL"),
        (f"{CANARY}://db/agents", "must be a PostgreSQL URL"),
        (f"postgresql://ann:{CANARY}@db:port/agents", "is not a URL that can be read"),
        (f"postgresql://ann:{CANARY}@[db/agents", "is not a URL that can be read"),
        (f"postgresql://ann:{CANARY}@db/agents\\nhost=evil", "control characters"),
    ],
)
def test_a_storage_that_is_not_a_postgresql_url_is_refused_without_quoting_it(
    tmp_path: Path, value: str, says: str
) -> None:
    message = refusal(tmp_path, f'storage = "{value}"\n')
    assert message.startswith(f"{tmp_path / 'config.toml'}: storage ")
    assert says in message


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("storage = 5432\n", "storage must be a string, got an integer"),
        ('storage = "  "\n', "storage must not be empty"),
        ('storage_schema = "Team"\n', "storage_schema must be a plain lower-case name"),
        ('storage_schema = "pg_catalog"\n', "not starting with a digit or 'pg_', got 'pg_catalog'"),
        ("storage_schema = 1\n", "storage_schema must be a string, got an integer"),
        ('[model]\nstorage = "postgresql://db/x"\n', "unknown key 'storage' in [model]"),
        ('storages = "postgresql://db/x"\n', "unknown key 'storages' in the top level"),
    ],
)
def test_storage_keys_are_validated_strictly(tmp_path: Path, text: str, says: str) -> None:
    assert says in refusal(tmp_path, text)


@given(st.text(max_size=70))
def test_storage_schema_is_accepted_exactly_when_the_storage_accepts_it(name: str) -> None:
    try:
        check_schema(name)
        storage_accepts = True
    except ValueError:
        storage_accepts = False
    # the same rule, checked without importing the driver, as load_config checks it
    from capabilities.cli import _config

    table = _config._Table(Path("config.toml"), "", {"storage_schema": name})
    try:
        _config._storage(table)
        config_accepts = True
    except ConfigError:
        config_accepts = False
    assert config_accepts == storage_accepts


def test_the_environment_variable_overrides_the_file_and_is_checked_as_strictly(
    tmp_path: Path,
) -> None:
    config = Config(storage="postgresql://file@db/agents", storage_schema="team_a")
    state = str(tmp_path / "state")
    assert choose_store(config, state, {}).url == "postgresql://file@db/agents"
    over = choose_store(config, state, {STORAGE_VARIABLE: URL})
    assert (over.url, over.schema) == (URL, "team_a")  # the schema stays the file's
    plain = choose_store(Config(), state, {STORAGE_VARIABLE: URL})
    assert (plain.url, plain.schema) == (URL, DEFAULT_SCHEMA)
    empty = choose_store(Config(), state, {STORAGE_VARIABLE: " "})
    assert empty.path == tmp_path / "state" / "effectagent.db"
    with pytest.raises(ConfigError) as caught:
        choose_store(config, state, {STORAGE_VARIABLE: f"mysql://ann:{CANARY}@db/agents"})
    assert str(caught.value).startswith("EFFECTAGENT_STORAGE must be a PostgreSQL URL")
    assert CANARY not in str(caught.value)


def test_the_schema_variable_overrides_the_file_s_schema_and_is_checked_as_strictly(
    tmp_path: Path,
) -> None:
    config = Config(storage="postgresql://file@db/agents", storage_schema="team_a")
    state = str(tmp_path / "state")
    chosen = choose_store(config, state, {SCHEMA_VARIABLE: "team_b"})
    assert (chosen.url, chosen.schema) == ("postgresql://file@db/agents", "team_b")
    both = choose_store(Config(), state, {STORAGE_VARIABLE: URL, SCHEMA_VARIABLE: "team_c"})
    assert (both.url, both.schema) == (URL, "team_c")
    assert CANARY not in both.name
    assert both.name.endswith("(schema team_c)")
    blank = choose_store(config, state, {SCHEMA_VARIABLE: "  "})
    assert blank.schema == "team_a"
    sqlite = choose_store(Config(), state, {SCHEMA_VARIABLE: "team_b"})
    assert sqlite.path == tmp_path / "state" / "effectagent.db"  # a file has no schema
    for bad in ("Team", "pg_catalog", "1st", "a-b", "x" * 64, "a; DROP SCHEMA public"):
        with pytest.raises(ConfigError) as caught:
            choose_store(config, state, {SCHEMA_VARIABLE: bad})
        assert str(caught.value).startswith(
            "EFFECTAGENT_STORAGE_SCHEMA must be a plain lower-case name"
        )


def test_a_store_is_a_path_or_a_url() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Store()
    with pytest.raises(ValueError, match="exactly one"):
        Store(path=Path("a.db"), url="postgresql://db/x")


def test_the_guide_s_storage_example_is_a_config_the_command_reads(tmp_path: Path) -> None:
    guide = (Path(__file__).resolve().parents[3] / "docs/guides/cli.md").read_text()
    blocks = re.findall(r"^```toml\n(.*?)^```", guide, re.S | re.M)
    examples = [b for b in blocks if b.startswith("storage = ") and "\n[" not in b]
    assert len(examples) == 1
    config = load_config(config_file(tmp_path, examples[0]))
    assert config.storage == "postgresql://agents@db.internal:5432/effectagent"
    assert config.storage_schema == "team_a"


def test_worker_is_a_command_of_its_own_with_the_options_of_admin_worker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from capabilities.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "a durable worker: run admitted submissions" in capsys.readouterr().out
    helps = []
    for command in (["worker"], ["admin", "worker"]):
        with pytest.raises(SystemExit) as exited:
            main([*command, "--help"])
        assert exited.value.code == 0
        helps.append(capsys.readouterr().out)
    for text in helps:
        for option in ("--max-active", "--until-idle", "--lease", "--poll-interval", "--config"):
            assert option in text
        assert "$EFFECTAGENT_STORAGE" in text
    assert "stopped by SIGTERM or Ctrl-C (its runs wait for the next worker)" in helps[0]


#: A password that reads like a parameter's name: where it lands by a typo, it is not shown.
NAMELIKE = "hunter2canary"


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("bogus_param=1", "has the query parameter 'bogus_param', which PostgreSQL does not take"),
        ("sslmode=require&sslmod=require", "has the query parameter 'sslmod', which PostgreSQL"),
        ("ssl=false", "has the query parameter 'ssl', which PostgreSQL does not take"),
        (f"{NAMELIKE}=1", "has a query parameter PostgreSQL does not take (its name not shown"),
        (f"{CANARY}=1", "has a query parameter PostgreSQL does not take (its name not shown"),
        (CANARY, "is not a URL PostgreSQL can read"),
        ("sslmode=%zz", "is not a URL PostgreSQL can read"),
    ],
)
def test_a_query_parameter_postgresql_does_not_take_is_a_config_error(
    tmp_path: Path, query: str, says: str
) -> None:
    """libpq refuses the whole URL for one unknown parameter: that was said, of a postgresql://
    URL, as a database that "cannot be opened: it is neither a postgresql:// URL nor …" (exit
    3)."""
    url = f"postgresql://ann:{NAMELIKE}@db.example/agents?{query}"
    message = refusal(tmp_path, f'storage = "{url}"\n')
    assert message.startswith(f"{tmp_path / 'config.toml'}: storage ")
    assert says in message
    assert NAMELIKE not in message
    state = str(tmp_path / "state")
    with pytest.raises(ConfigError) as caught:
        choose_store(Config(), state, {STORAGE_VARIABLE: url})
    assert str(caught.value).startswith(f"EFFECTAGENT_STORAGE {says}")
    assert CANARY not in str(caught.value)
    assert NAMELIKE not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://ann:pw@db.example/agents",
        "postgresql://ann:p%2A@db.example/agents",
        "postgresql://ann@db.example/agents?password=abc",
    ],
)
def test_a_password_too_short_to_redact_is_a_config_error_that_shows_no_part_of_it(
    tmp_path: Path, url: str
) -> None:
    """Every password is kept out of what runs show; one under 4 characters cannot be (it stopped
    every command with exit 3 and a sentence naming neither the storage nor the password)."""
    message = refusal(tmp_path, f'storage = "{url}"\n')
    assert message == (
        f"{tmp_path / 'config.toml'}: storage has a password under 4 characters, too short to keep "
        "out of what runs show"
    )
    fine = "postgresql://ann:pw%2Aok@db.example/agents"
    assert load_config(config_file(tmp_path, f'storage = "{fine}"\n')).storage == fine


def test_the_query_parameters_postgresql_takes_are_accepted(tmp_path: Path) -> None:
    query = "&".join(
        ("sslmode=require", "connect_timeout=5", "application_name=a", "ssl=true", "port=5433")
    )
    url = f"postgresql://ann:{CANARY}@db.example/agents?{query}"
    assert load_config(config_file(tmp_path, f'storage = "{url}"\n')).storage == url


def test_an_unknown_query_parameter_stops_a_command_with_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from capabilities.cli import main

    for name, value in cli_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    url = f"postgresql://ann:{CANARY}@127.0.0.1:1/agents?sslmode=disable&bogus_param=1"
    monkeypatch.setenv(STORAGE_VARIABLE, url)
    assert main(["sessions"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("effectagent: EFFECTAGENT_STORAGE has the query parameter 'bogus_param'")
    assert "cannot be opened" not in err
    assert CANARY not in err

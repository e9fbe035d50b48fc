"""Pure parts of the Sandbox port: validation, enforceability, posture, output bounds (no Trio)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox import (
    UNLIMITED,
    ArtifactRule,
    BubblewrapSandbox,
    Isolation,
    LimitNotEnforceable,
    LocalProcessSandbox,
    Mount,
    Sandbox,
    SandboxError,
    SandboxImplementation,
    SandboxLimits,
    SandboxRequest,
    SecretHandle,
    Unlimited,
)
from sandbox._command import LIMIT_FILESYSTEM, InvalidRequest, OutputBuffer, StreamName, build_env
from sandbox._command_checks import check_enforceable, required_limits, validate_request
from sandbox._posture import (
    LIMIT_CPU,
    LIMIT_FILE_SIZE,
    LIMIT_MEMORY,
    LIMIT_NETWORK,
    LIMIT_OUTPUT,
    LIMIT_PROCESSES,
    LIMIT_WALL_CLOCK,
)

ALL_LIMITS = (
    LIMIT_CPU,
    LIMIT_FILE_SIZE,
    LIMIT_FILESYSTEM,
    LIMIT_MEMORY,
    LIMIT_NETWORK,
    LIMIT_OUTPUT,
    LIMIT_PROCESSES,
    LIMIT_WALL_CLOCK,
)


def impl(
    enforced: frozenset[str], isolation: Isolation = Isolation.NAMESPACES
) -> SandboxImplementation:
    return SandboxImplementation(
        name="test",
        version="1",
        isolation=isolation,
        is_security_boundary=isolation is not Isolation.UNISOLATED,
        enforced_limits=enforced,
        unenforced_limits=frozenset(ALL_LIMITS) - enforced,
    )


def problems_of(request: SandboxRequest) -> tuple[str, ...]:
    with pytest.raises(InvalidRequest) as info:
        validate_request(request)
    return info.value.problems


# ---- posture -------------------------------------------------------------------------------


def test_unisolated_can_never_claim_a_security_boundary() -> None:
    with pytest.raises(ValueError, match="CAP-010"):
        SandboxImplementation(
            name="x",
            version="1",
            isolation=Isolation.UNISOLATED,
            is_security_boundary=True,
            enforced_limits=frozenset(),
            unenforced_limits=frozenset(),
        )


def test_a_limit_cannot_be_both_enforced_and_unenforced() -> None:
    with pytest.raises(ValueError, match="both"):
        SandboxImplementation(
            name="x",
            version="1",
            isolation=Isolation.NAMESPACES,
            is_security_boundary=True,
            enforced_limits=frozenset({LIMIT_CPU}),
            unenforced_limits=frozenset({LIMIT_CPU}),
        )


def test_errors_are_tagged_sandbox_errors() -> None:
    error = LimitNotEnforceable(LIMIT_MEMORY, "no cgroup")
    assert isinstance(error, SandboxError)
    assert error.tag == "LimitNotEnforceable"
    assert str(error) == "LimitNotEnforceable(limit='memory', reason='no cgroup')"


# ---- validation ----------------------------------------------------------------------------


def test_a_plain_request_is_valid() -> None:
    validate_request(SandboxRequest("echo", ("hi",)))


@pytest.mark.parametrize("field", ["args", "env_allowlist"])
@pytest.mark.parametrize("value", ["hello", b"hello"])
def test_a_string_where_a_sequence_of_strings_goes_is_refused_not_split_into_letters(
    field: str, value: object
) -> None:
    """``args="hello"`` would otherwise run ``echo h e l l o``."""
    with pytest.raises(TypeError, match=f"SandboxRequest.{field} must be a sequence of str"):
        SandboxRequest("echo", **{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("make", [BubblewrapSandbox, LocalProcessSandbox])
def test_something_that_is_not_a_request_is_an_invalid_request(make: Callable[[], Sandbox]) -> None:
    # A dict of the fields ended in AttributeError ('dict' object has no attribute 'command').
    fields: Any = {"command": "/bin/true"}
    with pytest.raises(InvalidRequest) as info:
        make().execute(fields)
    assert info.value.problems == ("the request must be a SandboxRequest, got dict",)


def test_every_problem_is_listed_at_once() -> None:
    request = SandboxRequest(
        "",
        ("a\0b",),
        cwd="relative",
        limits=SandboxLimits(wall_clock_seconds=0, output_bytes=-1, max_processes=0),
    )
    problems = problems_of(request)
    assert len(problems) == 6


@pytest.mark.parametrize(
    "mount",
    [
        Mount("relative", "/data"),
        Mount("/host", "/data/../etc"),
        Mount("/host", "/usr/local"),
        Mount("/host", "/proc/x"),
        Mount("/host", "/"),
        Mount("/host", "/etc"),
        Mount("/host", "/data", "rwx"),  # type: ignore[arg-type]
    ],
)
def test_bad_mounts_are_rejected(mount: Mount) -> None:
    assert problems_of(SandboxRequest("true", mounts=(mount,)))


@pytest.mark.parametrize("path", ["/bin/tools", "/sbin/x", "/lib/x", "/lib64/x", "/etc/app"])
def test_a_mount_inside_a_system_dir_is_rejected(path: str) -> None:
    # /bin, /lib… are read-only binds or links into /usr: bubblewrap cannot make a mount point
    # there, and the request failed as a crash after it had been accepted.
    assert problems_of(SandboxRequest("true", mounts=(Mount("/host", path),))) == (
        f"mounts: sandbox_path {path!r} is reserved for the system view",
    )
    validate_request(SandboxRequest("true", mounts=(Mount("/host", "/binaries"),)))


@pytest.mark.parametrize("path", ["//usr", "//proc", "//data"])
def test_a_path_with_a_doubled_leading_slash_is_not_clean(path: str) -> None:
    # normpath keeps a leading "//", which the kernel reads as "/": "//usr" would mount over the
    # system view past the reserved-path check, and "//data" beside "/data" past the twice check.
    assert problems_of(SandboxRequest("true", mounts=(Mount("/host", path),))) == (
        f"mounts: sandbox_path {path!r} is not a clean absolute path",
    )
    assert problems_of(SandboxRequest("true", mounts=(Mount("/" + "/host", "/data"),))) == (
        "mounts: host_path '//host' is not a clean absolute path",
    )
    assert problems_of(SandboxRequest("true", cwd="//workspace")) == (
        "cwd '//workspace' is not a clean absolute path",
    )


def test_a_command_with_a_doubled_leading_slash_or_past_the_kernels_lengths_is_invalid() -> None:
    # "//bin/true" ran under the local runner and was CommandNotFound under bubblewrap; a name
    # or path longer than the kernel takes was CommandNotFound too.
    assert problems_of(SandboxRequest("//bin/true")) == (
        "command '//bin/true' begins with a doubled slash",
    )
    assert problems_of(SandboxRequest("x" * 256)) == (
        "command has a name over the system's 255 bytes",
    )
    assert problems_of(SandboxRequest("/x" * 2100)) == (
        "command is 4200 bytes long, over the system's 4095",
    )
    validate_request(SandboxRequest("/bin/true"))


@pytest.mark.parametrize("host", ["/proc", "/proc/1", "/sys", "/sys/kernel/debug"])
def test_the_host_kernels_view_is_no_mount_source(host: str) -> None:
    # The host's /proc mounted in showed every host process and its command line (and, to a
    # workload of the caller's own user, their environments).
    assert problems_of(SandboxRequest("true", mounts=(Mount(host, "/data"),))) == (
        f"mounts: host_path {host!r} is the host kernel's view (its processes, their command "
        "lines and environments): no workload is shown it",
    )
    validate_request(SandboxRequest("true", mounts=(Mount("/processes", "/data"),)))


def test_text_the_kernel_cannot_take_is_an_invalid_request_not_an_encoding_crash() -> None:
    # A lone surrogate has no bytes (one standing for an undecodable byte, U+DC80..U+DCFF, has).
    request = SandboxRequest(
        "/bin/\ud800",
        ("\ud800", "\udcff"),
        env={"A": "\udfff"},
        env_allowlist=("A",),
        mounts=(Mount("/host/\ud800", "/data"), Mount("/h", "/\ud800")),
        artifacts=(ArtifactRule("\ud800"),),
    )
    problems = problems_of(request)
    assert problems == (
        "command '/bin/\\ud800' is not encodable text (a lone surrogate)",
        "args[0] is not encodable text (a lone surrogate)",
        "env: value of 'A' is not encodable text (a lone surrogate)",
        "mounts: host_path '/host/\\ud800' is not a clean absolute path",
        "mounts: sandbox_path '/\\ud800' is not a clean absolute path",
        "artifacts: glob '\\ud800' is not encodable text",
    )
    validate_request(SandboxRequest("/bin/echo", ("\udcff",)))


def test_a_path_too_long_for_the_kernel_is_an_invalid_request() -> None:
    long_name = "/data/" + "n" * 256
    long_path = "/data" + "/n" * 2100
    for path in (long_name, long_path):
        problems = problems_of(SandboxRequest("true", cwd=path, mounts=(Mount(path, path),)))
        assert len(problems) == 3
        assert all("over the system's" in problem for problem in problems)
    validate_request(SandboxRequest("true", mounts=(Mount("/h", "/data/" + "n" * 255),)))


def test_a_sandbox_path_mounted_twice_is_rejected() -> None:
    mounts = (Mount("/a", "/data"), Mount("/b", "/data"))
    assert problems_of(SandboxRequest("true", mounts=mounts)) == (
        "mounts: sandbox_path '/data' is mounted twice",
    )


def test_artifact_rules_must_stay_inside_rw_roots() -> None:
    request = SandboxRequest(
        "true",
        mounts=(Mount("/h", "/ro"),),
        artifacts=(ArtifactRule("../x"), ArtifactRule("*.txt", root="/ro"), ArtifactRule("/abs")),
    )
    assert len(problems_of(request)) == 3


def test_secrets_may_not_shadow_env() -> None:
    request = SandboxRequest(
        "true",
        env_allowlist=("TOKEN",),
        secrets=(SecretHandle("TOKEN", "s1"), SecretHandle("bad-name", "s2")),
    )
    assert len(problems_of(request)) == 2


names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)


@given(allow=st.lists(names, max_size=4), env=st.dictionaries(names, st.text(max_size=5)))
def test_env_outside_the_allowlist_is_always_rejected(
    allow: list[str], env: dict[str, str]
) -> None:
    request = SandboxRequest("true", env_allowlist=tuple(allow), env=env)
    outside = {n for n in env if n not in allow}
    nul = any("\0" in v for v in env.values())
    if outside or nul:
        assert problems_of(request)
    else:
        validate_request(request)
        built = build_env(request, {})
        assert set(built) <= {*allow, "PATH"}
        assert all(built[n] == v for n, v in env.items())


def test_request_repr_hides_stdin_bytes() -> None:
    assert "payload" not in repr(SandboxRequest("cat", stdin=b"payload"))


SECRET = "canary-7f3e9a1b2c"


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("mounts", Mount("/tmp", "/data"), "Mount"),
        ("secrets", SecretHandle("TOKEN", "s1"), "SecretHandle"),
        ("artifacts", ArtifactRule("*"), "ArtifactRule"),
        ("mounts", None, "Mount"),
        ("args", 5, "str"),
        ("env_allowlist", None, "str"),
    ],
)
def test_one_item_where_a_sequence_goes_is_refused_naming_the_field(
    field: str, value: object, kind: str
) -> None:
    """A lone Mount was refused with "'Mount' object is not iterable", naming no field."""
    with pytest.raises(
        TypeError, match=rf"SandboxRequest\.{field} must be a sequence of {kind}, not a"
    ):
        SandboxRequest("true", **{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"command": 5}, "command must be a non-empty str without NUL, got int"),
        ({"args": ("a", 5)}, "args[1] must be a str, got int"),
        ({"args": (SECRET.encode(),)}, "args[0] must be a str, got bytes"),
        ({"cwd": 5}, "cwd must be a clean absolute path or None, got int"),
        ({"env_allowlist": ("A", 5)}, "env_allowlist[1] must be a str, got int"),
        (
            {"env_allowlist": ("A",), "env": {"A": 5}},
            "env: the value of 'A' must be a str, got int",
        ),
        (
            {"env_allowlist": ("A",), "env": {"A": SECRET.encode()}},
            "env: the value of 'A' must be a str, got bytes",
        ),
        ({"env": {5: "x"}}, "env: a variable name must be a str, got int"),
        ({"env": [("A", "x")]}, "env must be a mapping of names to str values, got list"),
        ({"env": None}, "env must be a mapping of names to str values, got NoneType"),
        ({"stdin": SECRET}, "stdin must be bytes or None, got str"),
        ({"stdin": bytearray(b"x")}, "stdin must be bytes or None, got bytearray"),
        ({"limits": None}, "limits must be a SandboxLimits, got NoneType"),
        ({"limits": {"wall_clock_seconds": 5}}, "limits must be a SandboxLimits, got dict"),
        ({"mounts": [("/tmp", "/data")]}, "mounts[0] must be a Mount, got tuple"),
        ({"mounts": [Mount(5, "/data")]}, "mounts[0].host_path must be a str, got int"),  # type: ignore[arg-type]
        ({"mounts": [Mount("/tmp", ["/d"])]}, "mounts[0].sandbox_path must be a str, got list"),  # type: ignore[arg-type]
        ({"secrets": ["TOKEN"]}, "secrets[0] must be a SecretHandle, got str"),
        ({"secrets": [SecretHandle(5, "s1")]}, "secrets[0].env_name must be a str, got int"),  # type: ignore[arg-type]
        ({"secrets": [SecretHandle("T", 5)]}, "secrets[0].secret_id must be a str, got int"),  # type: ignore[arg-type]
        ({"artifacts": ["*.txt"]}, "artifacts[0] must be an ArtifactRule, got str"),
        ({"artifacts": [ArtifactRule(5)]}, "artifacts[0].glob must be a str, got int"),  # type: ignore[arg-type]
        (
            {"artifacts": [ArtifactRule("*", root=["/d"])]},  # type: ignore[arg-type]
            "artifacts[0].root must be a str or None, got list",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_an_invalid_request_naming_it(
    fields: dict[str, object], problem: str
) -> None:
    """Each of these crashed validation (or the workload) with a bare TypeError or
    AttributeError naming no field; none may echo a value, which could be a secret."""
    request = SandboxRequest(**{"command": "true", **fields})  # type: ignore[arg-type]
    problems = problems_of(request)
    assert problems == (problem,)
    assert SECRET not in repr(problems)


def test_a_request_of_the_wrong_type_is_refused_before_anything_runs() -> None:
    sandbox = LocalProcessSandbox()
    request = SandboxRequest("cat", stdin="hello", network="host", limits=LIFTED)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="stdin must be bytes or None, got str"):
        sandbox.execute(request)
    assert sandbox.owned().empty


@pytest.mark.parametrize("name", ["A\n", "A\nB", "\nA"])
def test_a_variable_name_with_a_newline_is_refused(name: str) -> None:
    """A pattern ending in ``$`` matched before a final newline: "A\n" passed as a name."""
    assert problems_of(SandboxRequest("true", env_allowlist=(name,))) == (
        f"env_allowlist: invalid variable name {name!r}",
    )
    assert problems_of(SandboxRequest("true", secrets=(SecretHandle(name, "s1"),))) == (
        f"secrets: invalid variable name {name!r}",
    )


@pytest.mark.parametrize(
    ("bounds", "problem"),
    [
        ({"max_bytes": math.nan}, "artifacts[0].max_bytes must be an int >= 0, got nan"),
        ({"max_bytes": math.inf}, "artifacts[0].max_bytes must be an int >= 0, got inf"),
        ({"max_bytes": -0.5}, "artifacts[0].max_bytes must be an int >= 0, got -0.5"),
        ({"max_bytes": 10.0}, "artifacts[0].max_bytes must be an int >= 0, got 10.0"),
        ({"max_bytes": -1}, "artifacts[0].max_bytes must be an int >= 0, got -1"),
        ({"max_bytes": "10"}, "artifacts[0].max_bytes must be an int >= 0, got a str"),
        ({"max_bytes": None}, "artifacts[0].max_bytes must be an int >= 0, got None"),
        ({"max_bytes": True}, "artifacts[0].max_bytes must be an int >= 0, got True"),
        ({"max_count": 1.5}, "artifacts[0].max_count must be an int >= 1, got 1.5"),
        ({"max_count": 0}, "artifacts[0].max_count must be an int >= 1, got 0"),
        ({"max_count": True}, "artifacts[0].max_count must be an int >= 1, got True"),
        ({"max_count": math.nan}, "artifacts[0].max_count must be an int >= 1, got nan"),
        ({"max_count": "2"}, "artifacts[0].max_count must be an int >= 1, got a str"),
    ],
)
def test_artifact_rule_bounds_must_be_ints_in_range(
    bounds: dict[str, object], problem: str
) -> None:
    """max_bytes=nan came back as b'' marked truncated for every file; max_count=1.5 collected
    two; max_bytes="10" failed with a bare TypeError."""
    request = SandboxRequest("true", artifacts=(ArtifactRule("*.txt", **bounds),))  # type: ignore[arg-type]
    assert problems_of(request) == (problem,)


def test_artifact_rule_bounds_at_their_minimum_are_valid() -> None:
    validate_request(
        SandboxRequest("true", artifacts=(ArtifactRule("*", max_bytes=0, max_count=1),))
    )


# ---- enforceability -----------------------------------------------------------------------


LIFTED = SandboxLimits(
    cpu_seconds=UNLIMITED,
    memory_bytes=UNLIMITED,
    max_processes=UNLIMITED,
    file_size_bytes=UNLIMITED,
)


def test_required_limits_follow_the_request() -> None:
    assert required_limits(SandboxRequest("true", network="host", limits=LIFTED)) == {
        LIMIT_WALL_CLOCK,
        LIMIT_OUTPUT,
    }
    full = SandboxRequest(
        "true",
        limits=SandboxLimits(
            cpu_seconds=1, memory_bytes=1 << 24, max_processes=4, file_size_bytes=10
        ),
    )
    assert (
        required_limits(full)
        == required_limits(SandboxRequest("true"))
        == {
            LIMIT_WALL_CLOCK,
            LIMIT_OUTPUT,
            LIMIT_CPU,
            LIMIT_MEMORY,
            LIMIT_PROCESSES,
            LIMIT_FILE_SIZE,
            LIMIT_NETWORK,
        }
    )


optional = st.just(UNLIMITED) | st.integers(min_value=1 << 20, max_value=1 << 30)


@given(
    enforced=st.frozensets(st.sampled_from(ALL_LIMITS)),
    cpu=st.just(UNLIMITED) | st.floats(min_value=0.1, max_value=100),
    memory=optional,
    processes=st.just(UNLIMITED) | st.integers(min_value=1, max_value=100),
    file_size=optional,
    network=st.sampled_from(["none", "host"]),
)
def test_any_request_with_an_unenforceable_limit_is_rejected(
    enforced: frozenset[str],
    cpu: float | Unlimited,
    memory: int | Unlimited,
    processes: int | Unlimited,
    file_size: int | Unlimited,
    network: str,
) -> None:
    limits = SandboxLimits(
        cpu_seconds=cpu, memory_bytes=memory, max_processes=processes, file_size_bytes=file_size
    )
    request = SandboxRequest("true", limits=limits, network=network)  # type: ignore[arg-type]
    implementation = impl(enforced)
    missing = required_limits(request) - enforced
    if missing:
        with pytest.raises(LimitNotEnforceable) as info:
            check_enforceable(implementation, request)
        assert info.value.limit == min(missing)
    else:
        check_enforceable(implementation, request)


# ---- output bounding ----------------------------------------------------------------------

chunks = st.lists(
    st.tuples(st.sampled_from(["stdout", "stderr"]), st.binary(max_size=64)), max_size=30
)


@given(bound=st.integers(min_value=0, max_value=512), sequence=chunks)
def test_output_buffer_keeps_exactly_the_head(
    bound: int, sequence: list[tuple[str, bytes]]
) -> None:
    buffer = OutputBuffer(bound)
    emitted = b"".join(buffer.accept(name, data) for name, data in sequence)  # type: ignore[arg-type]
    everything = b"".join(data for _, data in sequence)
    assert emitted == everything[:bound]
    assert buffer.kept == len(emitted) <= bound
    assert buffer.dropped == len(everything) - len(emitted)
    assert buffer.truncated == (len(everything) > bound)
    streams: tuple[StreamName, ...] = ("stdout", "stderr")
    for stream in streams:
        own = b"".join(d for n, d in sequence if n == stream)
        kept = buffer.value(stream)
        assert own.startswith(kept)


def test_every_limit_has_a_finite_default() -> None:
    limits = SandboxLimits()
    for field in attrs.fields(SandboxLimits):
        value = getattr(limits, field.name)
        assert type(value) in (int, float), field.name
        assert value > 0, field.name
    assert limits.memory_bytes == 512 << 20
    assert limits.max_processes == 64
    validate_request(SandboxRequest("true", limits=limits))
    validate_request(SandboxRequest("true", limits=LIFTED))


@pytest.mark.parametrize(
    "name", ["cpu_seconds", "memory_bytes", "max_processes", "file_size_bytes"]
)
def test_none_is_not_a_limit_unlimited_is_written(name: str) -> None:
    problems = problems_of(SandboxRequest("true", limits=SandboxLimits(**{name: None})))  # type: ignore[arg-type]
    assert problems == (
        f"limits.{name} is None: it must be {_rule(name)}; write UNLIMITED for no limit",
    )


def _rule(name: str) -> str:
    return {
        "cpu_seconds": "a number of seconds in (0, 86400]",
        "memory_bytes": "an int in [1 MiB, 2**60]",
        "max_processes": "an int in [1, 4194304]",
        "file_size_bytes": "an int in [0, 2**62]",
    }[name]


@pytest.mark.parametrize(
    ("name", "value"),
    [("memory_bytes", 2**60 + 1), ("max_processes", 4_194_305), ("file_size_bytes", 2**62 + 1)],
)
def test_a_bound_past_what_the_kernel_sets_is_an_invalid_request(name: str, value: int) -> None:
    """bubblewrap used to crash on these (SandboxCrashed) instead of refusing the request."""
    problems = problems_of(SandboxRequest("true", limits=SandboxLimits(**{name: value})))
    assert problems == (f"limits.{name} must be {_rule(name)}, got {value!r}",)
    validate_request(SandboxRequest("true", limits=SandboxLimits(**{name: value - 1})))


@pytest.mark.parametrize(
    "name", ["artifact_entries", "artifact_depth", "artifact_bytes", "artifact_seconds"]
)
def test_artifact_bounds_cannot_be_lifted(name: str) -> None:
    (problem,) = problems_of(SandboxRequest("true", limits=SandboxLimits(**{name: UNLIMITED})))  # type: ignore[arg-type]
    assert problem.startswith(f"limits.{name} must be")


def test_result_values_are_frozen() -> None:
    request = SandboxRequest("true")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        request.command = "false"  # type: ignore[misc]

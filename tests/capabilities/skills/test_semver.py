"""The semver parser and range matcher skills' framework ranges are checked with."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version as PepVersion

from capabilities.skills._semver import Version, VersionError, VersionRange

# The precedence chain of the semver 2.0.0 specification (§11), lowest first.
CHAIN = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.1.0",
    "2.0.0",
]


def test_the_specifications_precedence_chain_is_in_order() -> None:
    versions = [Version.parse(text) for text in CHAIN]
    for low, high in itertools.pairwise(versions):
        assert low < high
        assert high > low
        assert low != high
    shuffled = versions[5:] + versions[:5]
    assert sorted(shuffled) == versions


def test_build_metadata_is_kept_but_ignored_by_precedence() -> None:
    a, b = Version.parse("1.0.0+build.1"), Version.parse("1.0.0+exp.sha.5114f85")
    assert a == b
    assert hash(a) == hash(b)
    assert str(a) == "1.0.0+build.1"
    assert a.build == ("build", "1")


@pytest.mark.parametrize(
    "text",
    [
        "1",
        "1.2",
        "v1.2.3",
        "01.2.3",
        "1.02.3",
        "1.2.3-",
        "1.2.3-01",
        "1.2.3+",
        "1.2.3-a..b",
        " 1.2.3",
        "",
        "1.2.3\n",
        "1.2.3-rc.1\n",
        "1.2.3+build\n",
    ],
)
def test_what_is_not_semver_is_refused_saying_so(text: str) -> None:
    with pytest.raises(VersionError, match="is not a semantic version"):
        Version.parse(text)


@pytest.mark.parametrize(
    ("spec", "inside", "outside"),
    [
        (">=0.1.0, <0.2.0", ["0.1.0", "0.1.9", "0.2.0-rc.1"], ["0.0.9", "0.2.0", "1.0.0"]),
        ("^1.2.3", ["1.2.3", "1.9.0"], ["1.2.2", "2.0.0", "2.0.0-rc.1", "1.2.3-rc.1"]),
        ("^0.2.3", ["0.2.3", "0.2.9"], ["0.3.0", "0.2.2"]),
        ("^0.0.3", ["0.0.3"], ["0.0.4", "0.0.2"]),
        ("~1.2.3", ["1.2.3", "1.2.99"], ["1.3.0", "1.2.2"]),
        ("1.2.3", ["1.2.3", "1.2.3+x"], ["1.2.4"]),
        ("==1.2.3 || >=2.0.0", ["1.2.3", "2.5.0"], ["1.2.4", "1.9.9"]),
        (">1.0.0 <=1.1.0 !=1.0.5", ["1.0.1", "1.1.0"], ["1.0.0", "1.0.5", "1.1.1"]),
        ("*", ["0.0.0", "9.9.9-x"], []),
        (" >=0.1.0 ,<0.2.0 ", ["0.1.0"], ["0.2.0"]),
    ],
)
def test_ranges_admit_exactly_their_versions(
    spec: str, inside: list[str], outside: list[str]
) -> None:
    found = VersionRange.parse(spec)
    assert [v for v in inside if not found.contains(v)] == []
    assert [v for v in outside if found.contains(v)] == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "cannot be empty"),
        (">=0.1", r"'>=0.1' is not a comparator"),
        ("=>1.0.0", r"'=>1.0.0' is not a comparator"),
        (">=1.0.0 ||", "alternative 2 is empty"),
        # A comma stands between two comparators: one with nothing on a side of it is a typo.
        (">=0.1.0,", "alternative 1 has an empty comparator"),
        (",>=0.1.0", "alternative 1 has an empty comparator"),
        (">=0.1.0,, <1.0.0", "alternative 1 has an empty comparator"),
        (">=0.1.0 , , <1.0.0", "alternative 1 has an empty comparator"),
        ("1.0.0 || >=2.0.0,", "alternative 2 has an empty comparator"),
        (",", "alternative 1 has an empty comparator"),
    ],
)
def test_a_bad_range_is_refused_naming_the_part(spec: str, message: str) -> None:
    with pytest.raises(VersionError, match=message):
        VersionRange.parse(spec)


numbers = st.integers(min_value=0, max_value=30)
identifiers = st.one_of(
    st.integers(min_value=0, max_value=20).map(str),
    st.text("abcxyz-", min_size=1, max_size=3),
    st.text("ab0123", min_size=2, max_size=3).filter(lambda s: not s.isdigit()),
)
versions = st.builds(
    lambda numbers, pre: (
        f"{numbers[0]}.{numbers[1]}.{numbers[2]}" + ("-" + ".".join(pre) if pre else "")
    ),
    st.tuples(numbers, numbers, numbers),
    st.lists(identifiers, max_size=3),
)
releases = st.tuples(numbers, numbers, numbers)


def reference_key(text: str) -> tuple[object, ...]:
    """Semver precedence, written out from the specification's rules on the text."""
    core, _, pre = text.partition("-")
    numbers_ = tuple(int(part) for part in core.split("."))
    if not pre:
        return (numbers_, 1, ())
    ids = []
    for part in pre.split("."):
        ids.append((0, int(part), "") if part.isdecimal() else (1, -1, part))
    return (numbers_, 0, tuple(ids))


@given(versions, versions)
def test_precedence_agrees_with_the_reference(a: str, b: str) -> None:
    left, right = Version.parse(a), Version.parse(b)
    assert str(left) == a
    assert (left < right) == (reference_key(a) < reference_key(b))
    assert (left == right) == (reference_key(a) == reference_key(b))


@given(releases, releases, releases)
def test_a_bounded_range_agrees_with_packaging_on_releases(
    low: tuple[int, int, int], high: tuple[int, int, int], probe: tuple[int, int, int]
) -> None:
    text = ".".join(map(str, probe))
    low_text, high_text = ".".join(map(str, low)), ".".join(map(str, high))
    for ours, theirs in [
        (f">={low_text}, <{high_text}", f">={low_text},<{high_text}"),
        (f">{low_text} <={high_text}", f">{low_text},<={high_text}"),
        (f"!={low_text}", f"!={low_text}"),
        (f"~{low_text}", f">={low_text},<{low[0]}.{low[1] + 1}.0"),
    ]:
        expected = PepVersion(text) in SpecifierSet(theirs)
        assert VersionRange.parse(ours).contains(text) == expected, ours


@given(releases, versions)
def test_caret_is_its_explicit_bounds(low: tuple[int, int, int], probe: str) -> None:
    major, minor, patch = low
    bound = (major + 1, 0, 0) if major else (0, minor + 1, 0) if minor else (0, 0, patch + 1)
    version = Version.parse(probe)
    expected = Version(*low) <= version < Version(*bound, prerelease=("0",))
    assert VersionRange.parse(f"^{major}.{minor}.{patch}").contains(version) == expected

"""``tp.parse_size`` is the configuration parser's Note [Size grammar], reached through the extension.

The package has no size parser of its own (issue 31): these cases, those of
tests/config/config_test.cpp, check the binding's answers and its messages.
In process: loading ``_C`` installs nothing.
"""

from __future__ import annotations

import pytest
from conftest import requires_ext

import tensorpager as tp
from tensorpager import _budget_value, _ext

pytestmark = requires_ext

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("0", 0),
        ("7B", 7),
        ("100KB", 100_000),
        ("512MB", 512_000_000),
        ("12GB", 12_000_000_000),
        ("2TB", 2_000_000_000_000),
        ("3KiB", 3 * KiB),
        ("512MiB", 512 * MiB),
        ("12GiB", 12 * GiB),
        ("2TiB", 2 * TiB),
        ("12gib", 12 * GiB),
        ("12GIB", 12 * GiB),
        ("512mb", 512_000_000),
        ("  12 GiB\t", 12 * GiB),
    ],
)
def test_accepts_every_unit_case_insensitively(text: str, expected: int) -> None:
    assert tp.parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.5GB", 1_500_000_000),
        ("1.5KiB", 1536),
        ("0.1KiB", 102),
        ("0.5B", 0),
        ("1.000000000000000000000001TiB", TiB),
        ("0.99999999999999999999999999TiB", TiB - 1),
    ],
)
def test_fractions_with_a_unit_round_down(text: str, expected: int) -> None:
    assert tp.parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("-1GiB", "negative"),
        ("GiB", "does not start with a number"),
        ("+5", "does not start with a number"),
        ("1.GiB", "does not start with a number"),
        (".5GiB", "does not start with a number"),
        ("1.5", "needs a unit"),
        ("12G", "ambiguous"),
        ("12k", "ambiguous"),
        ("12GB B", "unknown unit 'GB B'"),
        ("1e9", "unknown unit 'e9'"),
        ("12 gigs", "unknown unit 'gigs'"),
        ("99999999999999999999", "too large"),
        ("20000000TiB", "too large"),
    ],
)
def test_rejects_malformed_sizes_naming_input_and_accepted_forms(text: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        tp.parse_size(text)
    message = str(info.value)
    assert f"'{text}'" in message
    assert reason in message
    assert _ext.load().ACCEPTED_SIZE_FORMS in message


def test_a_long_text_is_cut_in_the_message() -> None:
    with pytest.raises(ValueError, match=r"^'x{80}\.\.\. \(200 characters\)' is not a size: the size does not start"):
        tp.parse_size("x" * 200)


def test_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        tp.parse_size(12)  # type: ignore[arg-type]


def test_human_formatting() -> None:
    assert _ext.load().format_bytes(512) == "512 B"
    assert _ext.load().format_bytes(3 * GiB // 2) == "1.50 GiB"


def test_positive_size_takes_sizes_and_ints_and_names_what_it_refuses() -> None:
    assert _budget_value.positive_size("8MiB", "x") == 8 << 20
    assert _budget_value.positive_size(4096, "x") == 4096
    for bad in ("0", 0, -1, "lots", True, 1.5):
        with pytest.raises(ValueError, match=r"^chunk_bytes must be a positive size such as '8MiB'.*got " + repr(bad)):
            _budget_value.positive_size(bad, "chunk_bytes")

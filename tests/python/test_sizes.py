"""tensorpager._sizes follows Note [Size grammar]; the cases mirror tests/config/config_test.cpp."""

from __future__ import annotations

import pytest

from tensorpager import _sizes

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
    assert _sizes.parse_size(text) == expected


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
    assert _sizes.parse_size(text) == expected


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
        _sizes.parse_size(text)
    message = str(info.value)
    assert f"'{text}'" in message
    assert reason in message
    assert _sizes.ACCEPTED_SIZE_FORMS in message


def test_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        _sizes.parse_size(12)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.6", 0.6), ("1.0", 1.0), (" 0.05 ", 0.05), ("1", None), ("0.0", None), ("1.5", None),
     (".5", None), ("0.5GiB", None), ("60%", None)],
)
def test_ratios_need_a_point_and_lie_in_zero_to_one(text: str, expected: float | None) -> None:
    assert _sizes.parse_ratio(text) == expected


@pytest.mark.parametrize(
    ("n", "text"),
    [(12 * GiB, "12GiB"), (512_000_000, "512MB"), (1536, "1536B"), (0, "0B"), (1_024_000, "1000KiB")],
)
def test_exact_formatting_round_trips(n: int, text: str) -> None:
    assert _sizes.format_size(n) == text
    assert _sizes.parse_size(text) == n


def test_human_formatting() -> None:
    assert _sizes.format_bytes_human(512) == "512 B"
    assert _sizes.format_bytes_human(3 * GiB // 2) == "1.50 GiB"


def test_positive_size_takes_sizes_and_ints_and_names_what_it_refuses() -> None:
    assert _sizes.positive_size("8MiB", "x") == 8 << 20
    assert _sizes.positive_size(4096, "x") == 4096
    for bad in ("0", 0, -1, "lots", True, 1.5):
        with pytest.raises(ValueError, match=r"^chunk_bytes must be a positive size such as '8MiB'.*got " + repr(bad)):
            _sizes.positive_size(bad, "chunk_bytes")

"""Tests of size and duration parsing."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.units import parse_duration, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("0", 0), ("4096", 4096), ("1GiB", 1 << 30), ("512MiB", 512 << 20), ("2MiB", 2 << 20),
    ("2mib", 2 << 20), ("64k", 64 << 10), ("1.5GiB", 3 << 29), (" 8 MiB ", 8 << 20), ("1MB", 10**6),
    ("3B", 3), (".5KiB", 512), (123, 123),
])
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(("text", "fragment"), [
    ("lots", "size 'lots' is not a size"), ("1XB", "'1XB'"), ("-1MiB", "'-1MiB'"), ("", "''"),
    ("1.5", "not a whole number of bytes"), (-1, "negative"), (True, "got True"), (1.0, "got 1.0"),
])
def test_parse_size_rejects(text: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"e\.g\.") as info:
        parse_size(text)  # type: ignore[arg-type]
    assert fragment in str(info.value)


@pytest.mark.parametrize(("text", "expected"), [
    ("500ms", 0.5), ("2s", 2.0), ("1.5", 1.5), ("0", 0.0), ("250us", 0.00025), ("1m", 60.0),
    ("10ns", 1e-8), ("2h", 7200.0), (3, 3.0), (0.25, 0.25),
])
def test_parse_duration(text: str | float, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "fragment"), [
    ("soon", "duration 'soon' is not a duration"), ("5 parsecs", "'5 parsecs'"), ("-1s", "'-1s'"),
    (-0.5, "-0.5"), (float("inf"), "inf"), (float("nan"), "nan"), (None, "got None"),
])
def test_parse_duration_rejects(text: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"e\.g\.") as info:
        parse_duration(text)  # type: ignore[arg-type]
    assert fragment in str(info.value)

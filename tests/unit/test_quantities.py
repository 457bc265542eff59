"""Sizes and durations as a profile spells them: decimal fractions are exact, whatever a float would make of them."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.util.quantities import _DURATION_US, _SIZE_UNITS, parse_duration_us, parse_size

decimals = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 6)).map(
    lambda t: f"{t[0]}.{t[1]:0{t[2]}d}" if t[2] else str(t[0]))


@pytest.mark.parametrize(("text", "expected"), [
    ("4.1MB", 4_100_000),            # float: 4099999.9999999995
    ("2.3GB", 2_300_000_000),
    ("0.3kB", 300),
    ("1.5GiB", 1536 * 1024**2),
    ("123456789012345678", 123456789012345678),
    ("123456789012345678b", 123456789012345678),   # float: 123456789012345680
])
def test_sizes_are_exact(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["1" * 5000 + "MiB", "1." + "1" * 5000 + "s"])
def test_a_number_too_long_to_read_is_refused_with_a_message(text: str) -> None:
    parse = parse_duration_us if text.endswith("s") else parse_size
    with pytest.raises(ValueError, match=r"got a number of 500\d characters$"):
        parse(text)


def test_a_fraction_of_a_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="not a whole number of bytes"):
        parse_size("0.1GiB")


@pytest.mark.parametrize(("parse", "units"), [(parse_size, _SIZE_UNITS), (parse_duration_us, _DURATION_US)],
                         ids=["size", "duration"])
@given(number=decimals, data=st.data())
def test_a_quantity_is_the_exact_decimal_times_its_unit(parse: Callable[[object], int], units: dict[str, int],
                                                        number: str, data: st.DataObject) -> None:
    unit = data.draw(st.sampled_from(sorted(units)))
    exact = Fraction(number) * units[unit]
    if exact.denominator == 1:
        assert parse(number + unit) == exact
    else:
        with pytest.raises(ValueError, match="whole number"):
            parse(number + unit)

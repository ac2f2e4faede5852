"""The aggregation strategies (``backend_reader.strategy``): the names a propeller configuration uses, one to one."""

from __future__ import annotations

import pytest

from backend_reader.strategy import ErrorAggregationStrategy


def test_the_strategies_are_flytes_two_with_its_lowercase_names() -> None:
    assert [(member.name, member.value) for member in ErrorAggregationStrategy] == [
        ("DEFAULT", "default"),
        ("EARLIEST", "earliest"),
    ]


def test_a_configured_name_maps_to_its_strategy_and_compares_as_text() -> None:
    assert ErrorAggregationStrategy("earliest") is ErrorAggregationStrategy.EARLIEST
    assert ErrorAggregationStrategy.DEFAULT == "default"
    assert f"{ErrorAggregationStrategy.EARLIEST}" == "earliest"


@pytest.mark.parametrize("name", ["EARLIEST", "latest", ""])
def test_an_unknown_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="is not a valid ErrorAggregationStrategy"):
        ErrorAggregationStrategy(name)

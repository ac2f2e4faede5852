"""The engine's keys in the rendezvous store (``rootcause_engine/store_layout.py``): one spelling each,
none shared by two kinds of value, whatever the rank or index."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from rootcause_engine import store_layout

#: Every key function of the layout, by name: a new one is covered without editing this test.
KEY_FUNCTIONS: dict[str, Callable[..., str]] = {
    name: function for name, function in inspect.getmembers(store_layout, inspect.isfunction)
    if function.__module__ == store_layout.__name__
}
CONSTANTS = {name: value for name, value in vars(store_layout).items() if name.isupper() and isinstance(value, str)}


def _keys(function: Callable[..., str], numbers: range) -> list[str]:
    arity = len(inspect.signature(function).parameters)
    return [function(*([number] * arity)) for number in numbers]


def test_no_two_kinds_of_value_share_a_key_for_any_rank_or_index() -> None:
    owner: dict[str, str] = {}
    for name, function in KEY_FUNCTIONS.items():
        for key in _keys(function, range(0, 300)):
            assert owner.setdefault(key, name) == name, f"{key!r}: {owner[key]} and {name}"
    for name, key in CONSTANTS.items():
        if name in ("ROUND", "SOFT", "SOFT_PROCESS_GROUP"):
            continue  # prefixes, not keys
        assert owner.setdefault(key, name) == name, f"{key!r}: {owner[key]} and {name}"


def test_every_key_lives_under_the_engine_s_prefix_and_the_job_s_keys_under_soft() -> None:
    for name, function in KEY_FUNCTIONS.items():
        (key,) = _keys(function, range(7, 8))
        assert key.startswith(store_layout.ROUND), (name, key)
        assert key.startswith(store_layout.SOFT) == name.startswith("soft_"), (name, key)
    assert store_layout.soft_process_group_prefix(3) == f"{store_layout.SOFT_PROCESS_GROUP}/3"

"""The patch helpers of ``rootcause_engine/upstream/patching.py``: what a patch leaves behind when setting,
wrapping or restoring fails. (The plain restore of module, class and instance attributes is checked in
``tests/test_upstream_seams.py``.)"""

from __future__ import annotations

import types
from typing import Any

import pytest

from rootcause_engine.upstream.patching import patched, wrap_attribute


class _Target:
    """A throwaway upstream stand-in: a class attribute and a method."""

    limit = 10

    def ping(self) -> str:
        return "pong"


class _RefusingRestore:
    """Accepts every write until ``refuse`` names an attribute: then writing that one fails."""

    def __init__(self) -> None:
        self.refuse = ""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == getattr(self, "refuse", "") and name != "refuse":
            raise RuntimeError(f"cannot write {name}")
        super().__setattr__(name, value)


def test_a_class_attribute_the_class_owns_gets_the_very_same_object_back() -> None:
    original = vars(_Target)["ping"]
    with patched(_Target, ping=lambda self: "patched", limit=0):
        assert _Target().ping() == "patched" and _Target.limit == 0
    assert vars(_Target)["ping"] is original and _Target.limit == 10


def test_a_patch_is_seen_by_instances_made_before_it() -> None:
    made_before = _Target()
    with patched(_Target, limit=3):
        assert made_before.limit == 3
    assert made_before.limit == 10 and "limit" not in vars(made_before)


def test_a_patch_without_attributes_changes_nothing() -> None:
    module = types.ModuleType("throwaway")
    module.value = 1
    with patched(module):
        assert vars(module)["value"] == 1
    assert vars(module)["value"] == 1


def test_a_failed_restore_still_restores_the_others_and_raises_its_error() -> None:
    target = _RefusingRestore()
    target.first, target.second, target.third = "a", "b", "c"
    with pytest.raises(RuntimeError, match="cannot write second"), patched(
        target, first="x", second="y", third="z"
    ):
        target.refuse = "second"  # the block ends; putting "second" back now fails
    assert (target.first, target.second, target.third) == ("a", "y", "c")


def test_the_first_of_several_restore_errors_is_the_one_raised() -> None:
    class RefusesAll:
        locked = False

        def __setattr__(self, name: str, value: Any) -> None:
            if type(self).locked:
                raise RuntimeError(f"locked: {name}")
            super().__setattr__(name, value)

    target = RefusesAll()
    target.a, target.b = 0, 0
    with pytest.raises(RuntimeError, match="locked: b"), patched(target, a=1, b=2):
        RefusesAll.locked = True  # restores run last set, first: b, then a; both fail
    RefusesAll.locked = False
    assert vars(target) == {"a": 1, "b": 2}


def test_the_block_s_own_error_propagates_and_the_patch_is_undone() -> None:
    module = types.ModuleType("throwaway")
    module.handler = print
    with pytest.raises(KeyError), patched(module, handler=len):
        assert module.handler is len
        raise KeyError("inside")
    assert module.handler is print


def test_a_first_attribute_that_cannot_be_set_leaves_the_target_untouched() -> None:
    target = _RefusingRestore()
    target.refuse = "only"
    with pytest.raises(RuntimeError, match="cannot write only"), patched(target, only=1):
        pytest.fail("entered the block")
    assert "only" not in vars(target)


def test_wrap_attribute_hands_the_wrapper_the_original_and_keeps_it_for_good() -> None:
    module = types.ModuleType("throwaway")
    module.double = lambda x: 2 * x
    seen: list[Any] = []

    def wrap(original: Any) -> Any:
        seen.append(original)
        return lambda x: original(x) + 1

    original = wrap_attribute(module, "double", wrap)
    assert seen == [original] and original(4) == 8
    assert module.double(4) == 9


def test_a_wrapper_that_raises_leaves_the_original_in_place() -> None:
    target = _Target()

    def broken(original: Any) -> Any:
        raise ValueError("cannot wrap")

    with pytest.raises(ValueError, match="cannot wrap"):
        wrap_attribute(target, "ping", broken)
    assert "ping" not in vars(target) and target.ping() == "pong"


def test_wrap_attribute_of_a_missing_attribute_raises_and_sets_nothing() -> None:
    target = _Target()
    with pytest.raises(AttributeError, match="absent"):
        wrap_attribute(target, "absent", lambda original: original)
    assert "absent" not in vars(target)

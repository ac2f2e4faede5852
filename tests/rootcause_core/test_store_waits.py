"""Which ranks a store-wait timeout names (rootcause_core.store_waits), on torch's and gloo's real key forms."""

from __future__ import annotations

import pytest

from rootcause_core.store_waits import StoreWait, awaits_peers, read_store_wait


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # env:// without an agent store (the message torch 2.13 raised in a 3-rank run with rank 1 absent)
        ("wait timeout after 3000ms, keys: /default_pg/0//cpu//0/1", StoreWait(3000, (1,))),
        # the elastic agent's store, and the exception's type in front as a recorded message has it
        ("torch.distributed.DistStoreError: wait timeout after 20000ms, keys: /worker/attempt_2/default_pg/0//cpu//0/7",
         StoreWait(20000, (7,))),
        # a store passed to init_process_group (soft restarts: the plugin's own prefix)
        ("wait timeout after 60000ms, keys: /rootcause/soft/pg/0/0//cpu//0/1", StoreWait(60000, (1,))),
        # several keys, repeated and other groups' mixed in: the default group's ranks, once each
        ("wait timeout after 10ms, keys: /default_pg/0//cpu//0/3, /default_pg/0//cpu//0/3, /1//cpu//0/0, "
         "/default_pg/0//cuda//0/5", StoreWait(10, (3, 5))),
        # the message inside a longer report, on its own line
        ("Traceback (most recent call last):\n  ...\nDistStoreError: wait timeout after 5ms, keys: /0//cpu//0/4\n",
         StoreWait(5, (4,))),
    ],
)
def test_the_default_group_s_gloo_keys_name_the_ranks_waited_for(message: str, expected: StoreWait) -> None:
    assert read_store_wait(message) == expected
    assert awaits_peers(message)


@pytest.mark.parametrize(
    "message",
    [
        "wait timeout after 5000ms, keys: /dataset/ready",  # a user's own key
        "wait timeout after 5000ms, keys: /default_pg/1//cpu//0/2",  # a later group: its ranks are its own
        "wait timeout after 5000ms, keys: /default_pg/0//cuda//0",  # NCCL's unique id: names no rank
        "Timed out after 901 seconds waiting for clients. 2/3 clients joined.",
        "DistStoreError: wait timeout after ms, keys: /default_pg/0//cpu//0/1",
        "",
    ],
)
def test_other_store_errors_name_no_peer(message: str) -> None:
    assert read_store_wait(message) is None
    assert not awaits_peers(message)


def test_hostile_text_is_read_without_error_and_bounded() -> None:
    noise = "\x00\x1b[31m\ud800" * 200_000
    assert read_store_wait(noise + "wait timeout after 1ms, keys: /0//cpu//0/1" + noise) == StoreWait(1, (1,))
    many = ", ".join(f"/0//cpu//0/{rank}" for rank in range(500))
    wait = read_store_wait(f"wait timeout after 1ms, keys: {many}")
    assert wait is not None and 0 < len(wait.awaited) <= 64 and wait.awaited[0] == 0


@pytest.mark.parametrize("message", [
    "wait timeout after 20000ms, keys: /worker/attempt_0/default_pg/0//cpu//0/\u0661",
    "wait timeout after \u0662\u0660ms, keys: /worker/attempt_0/default_pg/0//cpu//0/1",
    "wait timeout after 20000ms, keys: /worker/attempt_0/default_pg/0//cpu//\u0660/1",
])
def test_numbers_are_ascii_digits_only(message: str) -> None:
    """``\\d`` alone takes any script's digits (and ``int`` reads them): a message whose rank or wait is
    written in other digits is no store wait of torch's."""
    assert read_store_wait(message) is None

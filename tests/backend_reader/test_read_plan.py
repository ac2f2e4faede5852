"""Listing keys (role and time in an error file's name) and the root-cause read that uses them.

``read_error`` must give exactly what reading every file gives (``read_all().execution_error()``),
while downloading only what can still hold the root cause; these tests check both on a local
folder with real files, for hand-made and random listings.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend_reader import RemoteFileOutputReader, Role
from backend_reader.documents import listing_key_for, parse_error_document
from backend_reader.read_plan import RootCauseReadPlan
from backend_reader.storage import ObjectInfo
from rootcause_core.error_files import ListingKey, keyed_file_name, listing_key_of
from testbed.reader_support import BASE_NS, NS, counting_downloads, error_document

UUID = "0123456789abcdef0123456789abcdef"


def keyed_name(worker: str, document: bytes) -> str:
    return keyed_file_name(f"error-{worker}-{uuid.uuid4().hex}", listing_key_for(document))


def write(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).write_bytes(data)


def same_answer(folder: Path, **kwargs: object) -> tuple[str, str]:
    """(fast, full) ExecutionError + recoverable, serialized, for one folder."""
    reader = RemoteFileOutputReader(str(folder), **kwargs)  # type: ignore[arg-type]
    fast = reader.read_error()
    full = reader.read_all().execution_error()
    return (
        f"{fast.execution_error.SerializeToString(deterministic=True)!r} {fast.is_recoverable}",
        f"{full.execution_error.SerializeToString(deterministic=True)!r} {full.is_recoverable}",
    )


# --------------------------------------------------------------------------- names


@given(st.sampled_from(list(Role)), st.one_of(st.none(), st.integers(-(2**64), 2**68)))
def test_a_key_survives_its_name(role: Role, timestamp_ns: int | None) -> None:
    key = ListingKey(role, timestamp_ns)
    assert listing_key_of(keyed_file_name(f"error-pod-1-{UUID}", key)) == key


@pytest.mark.parametrize(
    "name",
    [
        "error.pb",
        f"error-{UUID}.pb",  # flytekit's own per-pod file
        f"error-pod-1-{UUID}.pb",  # the plugin's names before listing keys
        f"error-pod-1-{UUID}.rc2c123.pb",  # a future version this reader does not know
        f"error-pod-1-{UUID}.rc1x123.pb",
        f"error-pod-1-{UUID}.rc1c.pb",
        f"error-pod-1-{UUID}.rc1c12a.pb",
        f"error-pod-1-{UUID}.rc1c123.pb.tmp",
        "outputs.rc1c123.pb",
    ],
)
def test_names_without_a_key_have_none(name: str) -> None:
    assert listing_key_of(name) is None


def test_the_key_is_what_the_reader_parses_from_the_document() -> None:
    assert listing_key_for(error_document("[root cause] boom", timestamp_ns=BASE_NS)) == ListingKey(
        Role.CANDIDATE, BASE_NS
    )
    assert listing_key_for(error_document("[victim] SIGTERM", timestamp_ns=None)) == ListingKey(Role.VICTIM, None)
    # An explicit 1970 is "no time" for the reader, so for the name too.
    assert listing_key_for(error_document("boom", timestamp_ns=0)) == ListingKey(Role.CANDIDATE, None)
    assert listing_key_for(b"") is None
    assert listing_key_for(b"\x0a\xff\xff") is None


@pytest.mark.parametrize("stem", ["outputs-1", "error/../x", ""])
def test_a_name_must_stay_an_error_file_in_the_folder(stem: str) -> None:
    with pytest.raises(ValueError, match="stem"):
        keyed_file_name(stem, None)


# ---------------------------------------------------------------------------- plan


def listed(*names: str) -> list[tuple[str, ObjectInfo]]:
    return [(f"/out/{name}", ObjectInfo(f"/out/{name}", name, 10)) for name in names]


def key_name(worker: str, role: Role, time: int | None) -> str:
    return keyed_file_name(f"error-{worker}-{UUID}", ListingKey(role, time))


def test_plan_reads_unkeyed_files_and_the_lowest_group_first() -> None:
    names = [
        key_name("late", Role.CANDIDATE, 20),
        key_name("victim", Role.VICTIM, 1),
        key_name("tie-a", Role.CANDIDATE, 10),
        key_name("tie-b", Role.CANDIDATE, 10),
        "error.pb",
        f"error-{UUID}.pb",
    ]
    plan = RootCauseReadPlan(listed(*names))
    first = sorted(name for _, info in plan.next_batch([], None) for name in [info.name])
    assert first == sorted([names[2], names[3], "error.pb", f"error-{UUID}.pb"])


def test_plan_goes_on_only_while_the_next_group_could_still_win() -> None:
    names = [key_name("a", Role.CANDIDATE, 10), key_name("b", Role.CANDIDATE, 20), key_name("c", Role.VICTIM, 5)]
    plan = RootCauseReadPlan(listed(*names))
    assert [info.name for _, info in plan.next_batch([], None)] == [names[0]]
    # Nothing usable yet (say the first file was corrupt): the next group is needed.
    assert [info.name for _, info in plan.next_batch([], None)] == [names[1]]
    best = parse_error_document(error_document("[root cause] b", timestamp_ns=20), f"/out/{names[1]}")
    assert plan.next_batch([best], best) == []  # type: ignore[list-item, arg-type]


def test_plan_reads_everything_left_when_a_name_lies() -> None:
    names = [key_name("a", Role.CANDIDATE, 10), key_name("b", Role.CANDIDATE, 20), key_name("c", Role.VICTIM, 5)]
    plan = RootCauseReadPlan(listed(*names))
    plan.next_batch([], None)
    lying = parse_error_document(error_document("[victim] SIGTERM", timestamp_ns=10), f"/out/{names[0]}")
    rest = plan.next_batch([lying], lying)  # type: ignore[list-item, arg-type]
    assert sorted(info.name for _, info in rest) == sorted(names[1:])


# ---------------------------------------------------------------------- the reads


def test_read_error_downloads_only_the_root_cause_and_unkeyed_files(tmp_path: Path) -> None:
    files = {}
    for index in range(200):
        victim = index % 3 == 0
        message = "[victim] connection closed by peer" if victim else "[root cause] RuntimeError"
        document = error_document(message, worker=f"pod-{index}", timestamp_ns=BASE_NS + (200 - index) * NS)
        files[keyed_name(f"pod-{index}", document)] = document
    old = error_document("RuntimeError: from an old writer", worker=None, timestamp_ns=None)
    files[f"error-{UUID}.pb"] = old
    write(tmp_path, files)
    with counting_downloads() as downloads:
        outcome = RemoteFileOutputReader(str(tmp_path)).read_error()
    assert outcome.execution_error.worker == "pod-199"  # the earliest candidate (index 198 is a victim)
    assert sorted(Path(path).name for path in downloads) == sorted(
        [f"error-{UUID}.pb", next(name for name in files if name.startswith("error-pod-199-"))]
    )
    fast, full = same_answer(tmp_path)
    assert fast == full


def test_a_corrupt_first_group_falls_through_to_the_next(tmp_path: Path) -> None:
    good = error_document("[root cause] second", worker="b", timestamp_ns=BASE_NS + 5)
    write(
        tmp_path,
        {
            key_name("a", Role.CANDIDATE, BASE_NS): b"\x0a\xff\xff",
            keyed_name("b", good): good,
        },
    )
    outcome = RemoteFileOutputReader(str(tmp_path)).read_error()
    assert outcome.execution_error.worker == "b"


def test_a_lying_name_makes_the_reader_read_everything(tmp_path: Path) -> None:
    # Named as the earliest candidate, but the content is a victim: names cannot be trusted then.
    lying = error_document("[victim] SIGTERM", worker="liar", timestamp_ns=BASE_NS)
    honest = [
        error_document("[root cause] boom", worker=f"pod-{index}", timestamp_ns=BASE_NS + index + 1)
        for index in range(5)
    ]
    files = {key_name("liar", Role.CANDIDATE, BASE_NS): lying}
    files.update({keyed_name(f"pod-{index}", document): document for index, document in enumerate(honest)})
    write(tmp_path, files)
    with counting_downloads() as downloads:
        assert RemoteFileOutputReader(str(tmp_path)).read_error().execution_error.worker == "pod-0"
    assert len(downloads) == 6


def test_ties_on_role_and_time_are_broken_by_the_full_rule(tmp_path: Path) -> None:
    documents = {
        worker: error_document("[root cause] same ns", worker=worker, timestamp_ns=BASE_NS) for worker in "cab"
    }
    write(tmp_path, {keyed_name(worker, document): document for worker, document in documents.items()})
    assert RemoteFileOutputReader(str(tmp_path)).read_error().execution_error.worker == "a"
    fast, full = same_answer(tmp_path)
    assert fast == full


# --------------------------------------------------------------- the property


documents = st.builds(
    error_document,
    st.sampled_from(["[root cause] boom", "[victim] SIGTERM", "RuntimeError", "connection closed by peer"]),
    worker=st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
    timestamp_ns=st.one_of(st.none(), st.integers(min_value=0, max_value=3).map(lambda t: BASE_NS + t)),
    recoverable=st.booleans(),
)
# How a file is named: honestly keyed (what our writer does), unkeyed (older writers), or keyed
# with arbitrary bytes inside (a corrupt or truncated upload of our writer).
entries = st.one_of(
    st.tuples(st.just("keyed"), documents),
    st.tuples(st.just("plain"), documents),
    st.tuples(st.just("corrupt"), st.binary(max_size=40)),
    st.tuples(st.just("big"), documents.map(lambda d: d + b"\x00" * 400)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entries, min_size=0, max_size=8), st.booleans())
def test_read_error_equals_reading_every_file(files: list[tuple[str, bytes]], with_copy: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="rootcause-keys-") as name:
        folder = Path(name)
        for index, (kind, data) in enumerate(files):
            stem = f"error-w{index}-{index:032x}"
            if kind == "plain":
                file_name = keyed_file_name(stem, None)
            elif kind == "corrupt":
                file_name = keyed_file_name(stem, ListingKey(Role.CANDIDATE, BASE_NS - 1))
            else:
                file_name = keyed_file_name(stem, listing_key_for(data))
            (folder / file_name).write_bytes(data)
        if with_copy and files:
            (folder / "error.pb").write_bytes(files[0][1])  # the plugin's create-if-absent copy
        fast, full = same_answer(folder, max_payload_bytes=300)
    assert fast == full

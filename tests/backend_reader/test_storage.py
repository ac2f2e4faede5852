"""The reader against real stores on loopback: a local folder, fake-gcs-server and moto's S3."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import urllib.request
from typing import Any

import pytest
from flyteidl.core import literals_pb2

from backend_reader import (
    ErrorAggregationStrategy,
    OutputsError,
    PayloadTooLargeError,
    RemoteFileOutputReader,
    Role,
    StorageError,
)
from backend_reader.documents import listing_key_for
from backend_reader.results import ERROR_FILE_NOT_FOUND
from backend_reader.storage import RetryPolicy, Storage
from rootcause_core.error_files import keyed_file_name
from rootcause_harness.loopback import free_port
from testbed.object_stores import ObjectStore
from testbed.reader_support import (
    BASE_NS,
    LoopbackProxy,
    access_denied_response,
    error_document,
    is_listing_request,
    store_port,
    worker_file_name,
    write_files,
)

pytestmark = pytest.mark.slow

LARGE = 1500


def reader(store: ObjectStore, prefix: str, **kwargs: Any) -> RemoteFileOutputReader:
    return RemoteFileOutputReader(prefix, storage_options=store.storage_options, **kwargs)


def names(uris: list[str]) -> list[str]:
    return [uri.rsplit("/", 1)[1] for uri in uris]


def test_no_error_files(any_store: ObjectStore) -> None:
    prefix = any_store.new_prefix("none")
    write_files(any_store.protocol, any_store.storage_options, [(f"{prefix}/outputs.pb", b"")])
    r = reader(any_store, prefix)
    assert r.is_error() is False
    result = r.read_all()
    assert (result.failures, result.skipped, result.is_error) == ((), (), False)
    outcome = r.read_error()
    assert outcome.execution_error.code == ERROR_FILE_NOT_FOUND and outcome.is_recoverable


def test_prefix_that_does_not_exist_is_empty(any_store: ObjectStore) -> None:
    assert reader(any_store, any_store.new_prefix("never-written")).is_error() is False


def test_one_file(any_store: ObjectStore) -> None:
    prefix = any_store.new_prefix("one")
    name = worker_file_name("pod-0")
    write_files(any_store.protocol, any_store.storage_options, [(f"{prefix}/{name}", error_document(worker="pod-0"))])
    r = reader(any_store, prefix)
    assert r.is_error()
    outcome = r.read_error()
    assert outcome.execution_error.worker == "pod-0"
    assert outcome.execution_error.error_uri == f"{prefix}/{name}"
    assert [f.worker for f in r.failures()] == ["pod-0"]


def test_mixed_layouts_old_and_new_files_ties_and_bad_files(any_store: ObjectStore) -> None:
    prefix, raw = any_store.new_prefix("mixed"), any_store.new_prefix("raw")
    tie = BASE_NS + 50
    files = {
        f"{prefix}/error-old.pb": error_document("RuntimeError: old entrypoint", worker=None, timestamp_ns=None),
        f"{prefix}/error-b-1.pb": error_document("[root cause] tie", worker="b", timestamp_ns=tie),
        f"{prefix}/error-a-1.pb": error_document("[root cause] tie", worker="a", timestamp_ns=tie),
        f"{prefix}/error-v-1.pb": error_document("[victim] SIGTERM", worker="v", timestamp_ns=BASE_NS),
        f"{raw}/errors/pod-r.pb": error_document("[root cause] raw layout", worker="r", timestamp_ns=tie + 1),
        f"{prefix}/error-empty.pb": b"",
        f"{prefix}/error-corrupt.pb": b"\x0a\xff\xff\xff",
        f"{prefix}/error-big.pb": error_document("[root cause] huge " + "x" * 5000, worker="big", timestamp_ns=1),
        f"{prefix}/outputs.pb": b"not an error file",
        f"{raw}/errors/notes.txt": b"not an error file",
    }
    write_files(any_store.protocol, any_store.storage_options, files.items())
    result = reader(any_store, prefix, raw_output_prefix=raw, max_payload_bytes=4096).read_all()
    assert names([f.error_uri for f in result.failures]) == [
        "error-a-1.pb",
        "error-b-1.pb",
        "pod-r.pb",
        "error-old.pb",
        "error-v-1.pb",
    ]
    assert result.failures[-1].role == Role.VICTIM
    reasons = {skip.error_uri.rsplit("/", 1)[1]: skip.reason for skip in result.skipped}
    assert set(reasons) == {"error-big.pb", "error-corrupt.pb", "error-empty.pb"}
    assert reasons["error-big.pb"].startswith("too large")
    assert reasons["error-empty.pb"] == "empty file"
    assert "corrupt" in reasons["error-corrupt.pb"]
    # Without the raw prefix, the raw layout is not read; the same inputs give the same answer.
    again = reader(any_store, prefix, max_payload_bytes=4096).read_all()
    assert "pod-r.pb" not in names([f.error_uri for f in again.failures])
    assert again.root_cause == result.root_cause


def test_default_strategy_reads_only_error_pb(any_store: ObjectStore) -> None:
    prefix = any_store.new_prefix("default")
    files = [
        (f"{prefix}/error.pb", error_document("ValueError: the shared file", worker="late", timestamp_ns=BASE_NS + 9)),
        (f"{prefix}/error-early-1.pb", error_document("[root cause] earlier", worker="early")),
    ]
    write_files(any_store.protocol, any_store.storage_options, files)
    default = reader(any_store, prefix, strategy=ErrorAggregationStrategy.DEFAULT).read_all()
    assert [f.worker for f in default.failures] == ["late"]
    earliest = reader(any_store, prefix).read_all()
    assert [f.worker for f in earliest.failures] == ["early", "late"]


def _large_set(prefix: str) -> tuple[dict[str, bytes], list[str]]:
    """1,500 files: shuffled times, every 7th a victim, every 100th an old file; expected order.

    Names carry listing keys except for the old files and every 10th (the plugin before keys).
    """
    rng = random.Random(1500)
    offsets = list(range(LARGE))
    rng.shuffle(offsets)
    files, keys = {}, []
    for index, offset in enumerate(offsets):
        worker = f"pod-{index:04d}"
        victim = index % 7 == 0
        old = index % 100 == 0
        message = ("[victim] peer left" if victim else "[root cause] failed") if not old else "RuntimeError"
        document = error_document(
            message,
            worker=None if old else worker,
            timestamp_ns=None if old else BASE_NS + offset * 1000,
        )
        key = None if index % 10 == 0 else listing_key_for(document)
        uri = f"{prefix}/{keyed_file_name(f'error-{worker}-{index:032x}', key)}"
        files[uri] = document
        role = 1 if victim and not old else 0
        keys.append((role, old, 0 if old else offset, "" if old else worker, uri))
    return files, [key[-1] for key in sorted(keys)]


_large_cache: dict[str, tuple[str, list[str]]] = {}


@pytest.fixture()
def large_prefix(any_store: ObjectStore) -> tuple[str, list[str]]:
    """A prefix holding 1,500 error files, written once per store (concurrently)."""
    if any_store.root not in _large_cache:
        prefix = any_store.new_prefix("large")
        files, expected = _large_set(prefix)
        write_files(any_store.protocol, any_store.storage_options, files.items())
        _large_cache[any_store.root] = (prefix, expected)
    return _large_cache[any_store.root]


def test_1500_files_are_all_read_in_order(any_store: ObjectStore, large_prefix: tuple[str, list[str]]) -> None:
    prefix, expected = large_prefix
    concurrency = 8 if any_store.protocol == "s3" else 32  # moto's server slows down past ~8
    result = reader(any_store, prefix, max_concurrency=concurrency).read_all()
    assert result.skipped == ()
    assert [f.error_uri for f in result.failures] == expected
    assert result.root_cause is not None and result.root_cause.role == Role.CANDIDATE
    assert_server_paginates(any_store, prefix)


def test_1500_files_root_cause_from_the_listing(any_store: ObjectStore, large_prefix: tuple[str, list[str]]) -> None:
    prefix, expected = large_prefix
    concurrency = 8 if any_store.protocol == "s3" else 32
    outcome = reader(any_store, prefix, max_concurrency=concurrency).read_error()
    assert outcome.execution_error.error_uri == expected[0]
    assert ".rc1c" in expected[0]  # the root cause was found through its name, not by reading everything


def assert_server_paginates(store: ObjectStore, prefix: str) -> None:
    """The listing of 1,500 files really spans pages of 1,000 (so the reader followed them)."""
    endpoint, key = store.storage_options.get("endpoint_url"), prefix.split("/", 3)[3]
    if store.protocol == "gs":
        query = f"prefix={key}/error&maxResults=1000"  # what gcsfs asks for, as real GCS's cap
        with urllib.request.urlopen(f"{endpoint}/storage/v1/b/rootcause-test/o?{query}") as response:
            page = json.load(response)
        assert len(page["items"]) == 1000 and page.get("nextPageToken")
    elif store.protocol == "s3":
        with urllib.request.urlopen(f"{endpoint}/rootcause-test?list-type=2&prefix={key}/error") as response:
            body = response.read().decode()
        assert body.count("<Key>") == 1000 and "<IsTruncated>true</IsTruncated>" in body


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_missing_bucket_is_one_clear_storage_error(kind: str, request: pytest.FixtureRequest) -> None:
    store: ObjectStore = request.getfixturevalue(f"{kind}_store")
    prefix = f"{store.protocol}://no-such-bucket-here/out"
    with pytest.raises(StorageError, match=r"bucket 'no-such-bucket-here' does not exist"):
        reader(store, prefix).read_all()


def test_outputs_exist_read_and_size_limit(any_store: ObjectStore) -> None:
    prefix = any_store.new_prefix("outputs")
    literal = literals_pb2.Literal(scalar=literals_pb2.Scalar(primitive=literals_pb2.Primitive(integer=7)))
    data = literals_pb2.LiteralMap(literals={"o0": literal}).SerializeToString()
    write_files(any_store.protocol, any_store.storage_options, [(f"{prefix}/outputs.pb", data)])
    r = reader(any_store, prefix)
    assert r.exists()
    outputs, error = r.read()
    assert error is None and outputs is not None and outputs.literals["o0"].scalar.primitive.integer == 7
    with pytest.raises(PayloadTooLargeError, match="too large"):
        reader(any_store, prefix, max_payload_bytes=4).exists()
    with pytest.raises(PayloadTooLargeError, match="too large"):
        reader(any_store, prefix, max_payload_bytes=4).read()
    missing = reader(any_store, any_store.new_prefix("nothing"))
    assert missing.exists() is False
    with pytest.raises(OutputsError, match="outputs not found"):
        missing.read()
    empty = any_store.new_prefix("empty-outputs")
    write_files(any_store.protocol, any_store.storage_options, [(f"{empty}/outputs.pb", b"")])
    outputs, error = reader(any_store, empty).read()
    assert outputs is None and error is not None and error.execution_error.code == "No outputs produced"


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_late_file_is_waited_for(kind: str, request: pytest.FixtureRequest) -> None:
    """The third file lands only after the reader has listed two: it must list again and use it.

    The store is reached through a proxy that sees every request: the late file is written to the
    store when the reader's second listing arrives, so the first listing cannot have seen it, and a
    reader that did not wait would never make that second listing nor find the file.
    """
    store: ObjectStore = request.getfixturevalue(f"{kind}_store")
    prefix = store.new_prefix("late")
    early = [(f"{prefix}/{worker_file_name(w)}", error_document("[victim] SIGTERM", worker=w)) for w in ("a", "b")]
    write_files(store.protocol, store.storage_options, early)
    late = (f"{prefix}/{worker_file_name('c')}", error_document("[root cause] slow pod", worker="c"))
    listings: list[str] = []

    def on_request(request_line: str) -> None:
        if is_listing_request(request_line):
            listings.append(request_line)
            if len(listings) == 2:  # the pod that was slow to fail writes its file now
                write_files(store.protocol, store.storage_options, [late])

    with LoopbackProxy(store_port(store.storage_options), on_request=on_request) as proxy:
        options = {**store.storage_options, "endpoint_url": proxy.url}
        # the late file ends the wait as soon as it lands; the timeout only bounds a broken test
        r = RemoteFileOutputReader(prefix, storage_options=options, expected_workers=3, settle_timeout=120)
        result = r.read_all()
    assert len(listings) == 2  # it saw two, waited, listed again, and stopped once three were there
    assert sorted(f.worker for f in result.failures) == ["a", "b", "c"]
    assert result.root_cause is not None and result.root_cause.worker == "c"


def test_settle_timeout_decides_with_what_is_there(file_store: ObjectStore) -> None:
    prefix = file_store.new_prefix("short")
    write_files("file", {}, [(f"{prefix}/{worker_file_name('a')}", error_document(worker="a"))])
    started = time.monotonic()
    result = reader(file_store, prefix, expected_workers=4, settle_timeout=0.3).read_all()
    assert time.monotonic() - started >= 0.3
    assert [f.worker for f in result.failures] == ["a"]


def test_async_api_and_sync_api_inside_a_running_loop(file_store: ObjectStore) -> None:
    prefix = file_store.new_prefix("loop")
    write_files("file", {}, [(f"{prefix}/{worker_file_name('a')}", error_document(worker="a"))])
    r = reader(file_store, prefix)

    async def inside_loop() -> tuple[str, str]:
        from_async = (await r.aio.read_error()).execution_error.worker
        from_sync = r.read_error().execution_error.worker  # runs on a private loop in a thread
        return from_async, from_sync

    assert asyncio.run(inside_loop()) == ("a", "a")


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_connection_resets_are_retried(kind: str, request: pytest.FixtureRequest) -> None:
    store: ObjectStore = request.getfixturevalue(f"{kind}_store")
    prefix = store.new_prefix("flaky")
    files = [(f"{prefix}/{worker_file_name(f'w{i}')}", error_document(worker=f"w{i}")) for i in range(3)]
    write_files(store.protocol, store.storage_options, files)
    with LoopbackProxy(store_port(store.storage_options), reset_first=2) as proxy:
        options = {**store.storage_options, "endpoint_url": proxy.url}
        result = RemoteFileOutputReader(prefix, storage_options=options).read_all()
    assert proxy.resets == 2
    assert sorted(f.worker for f in result.failures) == ["w0", "w1", "w2"]


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_a_file_deleted_after_listing_is_skipped_not_fatal(kind: str, request: pytest.FixtureRequest) -> None:
    """Files vanish (retention, a retried attempt cleaning up): the others are still read.

    Both files are in the store when the reader lists them; the proxy deletes one from the store
    when the reader's download of it arrives, just before the store answers that download.
    """
    store: ObjectStore = request.getfixturevalue(f"{kind}_store")
    prefix = store.new_prefix("vanish")
    keep, gone_name = f"{prefix}/{worker_file_name('keep')}", worker_file_name("gone")
    gone = f"{prefix}/{gone_name}"
    write_files(
        store.protocol, store.storage_options, [(keep, error_document(worker="keep")), (gone, error_document())]
    )
    deleted: list[str] = []

    def on_request(request_line: str) -> None:
        if gone_name in request_line and not is_listing_request(request_line) and not deleted:
            store.filesystem().rm(gone)
            deleted.append(request_line)

    with LoopbackProxy(store_port(store.storage_options), on_request=on_request) as proxy:
        result = RemoteFileOutputReader(
            prefix, storage_options={**store.storage_options, "endpoint_url": proxy.url}
        ).read_all()
    assert len(deleted) == 1  # the listing named the file, and the reader went to download it
    assert [f.worker for f in result.failures] == ["keep"]
    assert [(s.error_uri, s.reason) for s in result.skipped] == [(gone, "deleted between listing and reading")]


def test_every_message_in_a_result_is_valid_text(any_store: ObjectStore) -> None:
    prefix = any_store.new_prefix("text")
    long = "[root cause] " + "é" * 80_000  # 160 KB of UTF-8: cut to 100 KiB, head and tail
    write_files(any_store.protocol, any_store.storage_options, [(f"{prefix}/error-a-1.pb", error_document(long))])
    message = reader(any_store, prefix).read_error().execution_error.message
    assert re.search("<Message Truncated>", message) and len(message.encode()) < 110_000


# Retries. gcsfs and s3fs retry transient errors themselves, so by default the reader adds none of
# its own for them (``default_retry_policy``); its RetryPolicy is what every other fsspec store
# relies on. To meet it with real network faults, S3 is read with botocore's retries turned off:
# s3fs does not retry a failed connection itself, and aiohttp resends an idempotent request at
# most once, so whatever rides out more than one reset in a row is the reader's own loop.
NO_CLIENT_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 1}}}
OUR_RETRIES = RetryPolicy(attempts=3, base_delay_s=0.001)


def storage_call(url: str, options: dict[str, Any], retry: RetryPolicy, call: str) -> Any:
    """One public ``Storage`` call on ``url`` (``read``, ``list_folder`` of its folder, or ``size``)."""

    async def run() -> Any:
        async with Storage.for_url(url, options, retry) as storage:
            if call == "read":
                return await storage.read(storage.strip(url))
            if call == "list_folder":
                return await storage.list_folder(url.rsplit("/", 1)[0], "error")
            return await storage.size(url)

    return asyncio.run(run())


def test_connection_resets_are_retried_by_our_policy(s3_store: ObjectStore) -> None:
    prefix = s3_store.new_prefix("resets")
    url, data = f"{prefix}/{worker_file_name('a')}", error_document(worker="a")
    write_files("s3", s3_store.storage_options, [(url, data)])
    port = store_port(s3_store.storage_options)
    # the client alone gives up on two resets in a row ...
    with LoopbackProxy(port, reset_first=2) as proxy:
        options = {**s3_store.storage_options, **NO_CLIENT_RETRIES, "endpoint_url": proxy.url}
        with pytest.raises(StorageError, match=rf"^reading {re.escape(url)} failed after 1 attempts: "):
            storage_call(url, options, RetryPolicy(attempts=1), "read")
    # ... and the reader's retries ride them out
    with LoopbackProxy(port, reset_first=2) as proxy:
        options = {**s3_store.storage_options, **NO_CLIENT_RETRIES, "endpoint_url": proxy.url}
        assert storage_call(url, options, OUR_RETRIES, "read") == data
    assert proxy.resets == 2
    # a network that never recovers: three real attempts (each one or two connections), then one error
    with LoopbackProxy(port, reset_first=10**6) as proxy:
        options = {**s3_store.storage_options, **NO_CLIENT_RETRIES, "endpoint_url": proxy.url}
        with pytest.raises(StorageError, match=rf"^reading {re.escape(url)} failed after 3 attempts: "):
            storage_call(url, options, OUR_RETRIES, "read")
    assert 3 <= proxy.resets <= 6


@pytest.mark.parametrize(("call", "what"), [("read", "reading"), ("list_folder", "listing"), ("size", "checking")])
def test_refused_connections_are_retried_then_one_clear_storage_error(
    s3_store: ObjectStore, call: str, what: str
) -> None:
    prefix = s3_store.new_prefix("refused")
    url = f"{prefix}/{worker_file_name('a')}"
    where = url if call != "list_folder" else prefix
    port = free_port()  # nothing listens there: every connection is refused
    options = {**s3_store.storage_options, **NO_CLIENT_RETRIES, "endpoint_url": f"http://127.0.0.1:{port}"}
    # the detail after the colon is the client library's and names the endpoint it could not reach
    expected = rf"^{what} {re.escape(where)} failed after 3 attempts: .*127\.0\.0\.1:{port}"
    with pytest.raises(StorageError, match=expected):
        storage_call(url, options, OUR_RETRIES, call)


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_permission_denied_is_one_clear_storage_error_and_not_retried(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store: ObjectStore = request.getfixturevalue(f"{kind}_store")
    prefix = store.new_prefix("denied")
    url = f"{prefix}/{worker_file_name('a')}"
    write_files(store.protocol, store.storage_options, [(url, error_document(worker="a"))])
    with LoopbackProxy(
        store_port(store.storage_options), on_request=lambda _: access_denied_response(store.protocol)
    ) as proxy:
        options = {**store.storage_options, "endpoint_url": proxy.url}
        with pytest.raises(StorageError, match=rf"^permission denied reading {re.escape(url)}: "):
            storage_call(url, options, OUR_RETRIES, "read")
        assert len(proxy.requests) == 1  # asked once: a refusal is not worth another try
        with pytest.raises(StorageError, match=rf"^permission denied checking {re.escape(url)}: "):
            storage_call(url, options, OUR_RETRIES, "size")
        with pytest.raises(StorageError, match=rf"^permission denied listing {re.escape(prefix)}: "):
            RemoteFileOutputReader(prefix, storage_options=options, retry=OUR_RETRIES).read_all()

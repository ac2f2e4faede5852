"""Property: whatever bytes sit in the error files, the reader returns a result, never raises,
and accounts for every file (a failure or a skipped file with a reason)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend_reader import RemoteFileOutputReader
from testbed.reader_support import error_document

valid_documents = st.builds(
    error_document,
    st.text(max_size=60),
    worker=st.one_of(st.none(), st.text(max_size=10)),
    timestamp_ns=st.one_of(st.none(), st.integers(min_value=0, max_value=2**62)),
)
file_contents = st.one_of(st.binary(max_size=300), valid_documents, valid_documents.map(lambda d: d[: len(d) // 2]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(file_contents, min_size=1, max_size=6))
def test_arbitrary_error_files_never_escape_as_exceptions(contents: list[bytes]) -> None:
    with tempfile.TemporaryDirectory(prefix="rootcause-fuzz-") as folder:
        for index, data in enumerate(contents):
            Path(folder, f"error-{index}.pb").write_bytes(data)
        result = RemoteFileOutputReader(folder, max_payload_bytes=200).read_all()
    assert result.is_error
    assert len(result.failures) + len(result.skipped) == len(contents)
    assert all(skip.reason for skip in result.skipped)
    outcome = result.execution_error()
    assert outcome.execution_error.code or outcome.execution_error.message

"""The reader reads object stores through gcsfs and s3fs even where Flyte 2 took over fsspec's registry."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import fsspec, gcsfs, s3fs
import flyte.storage  # registers obstore's filesystems for s3, gs and abfs over fsspec's (clobber=True)
from backend_reader.filesystems import filesystem_class, url_to_fs
taken = [p for p in ("gs", "s3") if fsspec.get_filesystem_class(p).__module__.split(".")[0] == "obstore"]
assert taken == ["gs", "s3"], taken
assert filesystem_class("gs") is gcsfs.GCSFileSystem and filesystem_class("gcs") is gcsfs.GCSFileSystem
assert filesystem_class("s3") is s3fs.S3FileSystem and filesystem_class("s3a") is s3fs.S3FileSystem
assert filesystem_class("file") is fsspec.get_filesystem_class("file")
fs, path = url_to_fs("s3://bucket/run/error.pb", anon=True, skip_instance_cache=True)
assert isinstance(fs, s3fs.S3FileSystem) and path == "bucket/run/error.pb", (fs, path)
print("ok")
"""


def test_gs_and_s3_stay_gcsfs_and_s3fs_after_flyte_2_is_imported() -> None:
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]

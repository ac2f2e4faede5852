"""Which fsspec filesystem class serves a protocol: gcsfs for ``gs``, s3fs for ``s3``, fsspec's registry otherwise.

Why not fsspec's registry alone: it is one process-wide table that any library may overwrite.
Flyte 2 does, on import: ``flyte.storage`` registers obstore's filesystems for ``s3``, ``gs`` and
``abfs`` over gcsfs and s3fs (``clobber=True``). A process that imports Flyte 2 beside this reader
(a notebook, a service reading both kinds of runs, a test run) would then read through
filesystems the reader was not built on: their sessions, errors and listings differ. The reader
names the filesystems it is made for; other protocols (``file``, ``memory``, ``abfs``...) still
come from the registry.
"""

from __future__ import annotations

import importlib
from typing import Any

import fsspec
from fsspec.utils import get_protocol

#: protocol -> (module, class): the object-store filesystems the reader is built and tested on
_PINNED = {
    "gs": ("gcsfs", "GCSFileSystem"),
    "gcs": ("gcsfs", "GCSFileSystem"),
    "s3": ("s3fs", "S3FileSystem"),
    "s3a": ("s3fs", "S3FileSystem"),
}


def filesystem_class(protocol: str) -> type[Any]:
    """The filesystem class for ``protocol``; raises ``ValueError`` or ``ImportError`` as fsspec does."""
    pinned = _PINNED.get(protocol)
    if pinned is None:
        return fsspec.get_filesystem_class(protocol)
    module, name = pinned
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def filesystem(protocol: str, **storage_options: Any) -> Any:
    """A filesystem instance for ``protocol`` (``fsspec.filesystem``, with the classes above)."""
    return filesystem_class(protocol)(**storage_options)


def url_to_fs(url: str, **storage_options: Any) -> tuple[Any, str]:
    """The filesystem for ``url``'s protocol and the path within it (``fsspec.core.url_to_fs``, one level)."""
    fs_class = filesystem_class(get_protocol(url))
    return fs_class(**storage_options), fs_class._strip_protocol(url)

"""An action's output path, looked at through ``flyte.storage``: what other pods of the job wrote there.

Flyte 2 reads one ``error.pb`` (and one ``outputs.pb``) per action, which every pod of the job may
write; a pod that must leave the answer to another pod (rank 0's outputs, the culprit's error) looks
here for what that pod wrote. Through the filesystems and credentials Flyte 2's runtime uses for its
own uploads, so a pod sees exactly what the backend will read.
"""

from __future__ import annotations

import dataclasses

import fsspec
from flyte import storage

from rootcause_core.error_files import ERROR_FILE_NAME
from rootcause_engine.agent.isolation_gate import FsspecBoard
from rootcause_engine.agent.rank_0_outputs import OUTPUTS_FILE_NAME

#: Bytes read from an ``error.pb`` at most: a document of this plugin is far smaller (its message is
#: bounded by ``rootcause_core.safe_text``); anything larger is not one and is not read.
MAX_ERROR_DOCUMENT_BYTES = 4 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class ActionOutputs:
    """The action's output path (``output_path``, as the task context names it)."""

    output_path: str

    def outputs_written(self) -> bool:
        return self._exists(OUTPUTS_FILE_NAME)

    def error_written(self) -> bool:
        return self._exists(ERROR_FILE_NAME)

    def error_document(self) -> bytes | None:
        """The bytes of ``error.pb`` now; ``None`` while there is none, or one too large to be ours.
        Store errors other than absence propagate (the caller's look decides what they mean)."""
        path = storage.join(self.output_path, ERROR_FILE_NAME)
        fs = self._forgetful_filesystem()
        try:
            if fs.size(path) > MAX_ERROR_DOCUMENT_BYTES:
                return None
            return bytes(fs.cat_file(path))
        except FileNotFoundError:
            return None

    def board(self) -> FsspecBoard:
        """The path as the isolation gate's third party (pods that lost each other post there)."""
        return FsspecBoard(storage.get_underlying_filesystem(path=self.output_path), self.output_path)

    def _exists(self, name: str) -> bool:
        self._forgetful_filesystem()
        return storage.exists_sync(storage.join(self.output_path, name))

    def _forgetful_filesystem(self) -> fsspec.AbstractFileSystem:
        """The path's filesystem with its cached listing of the path forgotten: fsspec instances are
        shared, and ``exists`` answers from a cached listing, which would say "absent" for ever."""
        fs = storage.get_underlying_filesystem(path=self.output_path)
        fs.invalidate_cache(self.output_path)
        return fs

"""Where error and output files live, and which names count as error files.

Pure string logic, kept apart from storage so the naming rules are tested without a store.

Two layouts are read:

- Flyte's own: ``<output_prefix>/error.pb`` (one writer) and, with distributed error aggregation,
  ``<output_prefix>/error-<uuid>.pb`` (flytekit) or ``error-<worker>-<uuid>.<listing key>.pb``
  (this plugin, ``rootcause_core.error_files``) next to it: the name starts with ``error``, which
  is exactly what Flyte's Go reader lists;
- the RFC's: ``<raw_output_prefix>/errors/<anything>.pb``.
"""

from __future__ import annotations

import dataclasses

from backend_reader.strategy import ErrorAggregationStrategy
from rootcause_core.error_files import ERROR_FILE_NAME, ERROR_FILE_STEM, PROTO_SUFFIX
from rootcause_core.store_paths import base_name, join

__all__ = [
    "ERROR_FILE_NAME", "ERROR_FILE_STEM", "PROTO_SUFFIX", "ListingSpec", "base_name", "error_listings", "join",
]
OUTPUTS_FILE_NAME = "outputs.pb"
RAW_ERRORS_FOLDER = "errors"


@dataclasses.dataclass(frozen=True)
class ListingSpec:
    """One listing to make: a folder, the server-side name prefix, and a name filter."""

    folder: str
    name_prefix: str
    exact_name: str | None = None

    def accepts(self, name: str) -> bool:
        """True when a base name found in ``folder`` is an error file of this layout."""
        if self.exact_name is not None:
            return name == self.exact_name
        return name.startswith(self.name_prefix) and name.endswith(PROTO_SUFFIX)


def error_listings(
    output_prefix: str, raw_output_prefix: str | None, strategy: ErrorAggregationStrategy
) -> list[ListingSpec]:
    """The listings that find every error file the strategy reads."""
    if strategy == ErrorAggregationStrategy.DEFAULT:
        return [ListingSpec(output_prefix, ERROR_FILE_NAME, exact_name=ERROR_FILE_NAME)]
    listings = [ListingSpec(output_prefix, ERROR_FILE_STEM)]
    if raw_output_prefix:
        listings.append(ListingSpec(join(raw_output_prefix, RAW_ERRORS_FOLDER), ""))
    return listings


def is_single_writer_copy(error_uri: str, output_prefix: str) -> bool:
    """True for ``<output_prefix>/error.pb``: with our plugin, a copy of one per-worker file.

    The plugin writes each worker's document to its own file and also creates ``error.pb`` if it
    does not exist yet, so that backends reading only ``error.pb`` still see an error. The reader
    must not count that copy as one more failure.
    """
    return error_uri == join(output_prefix, ERROR_FILE_NAME)


def count_error_files(error_uris: list[str], output_prefix: str) -> int:
    """How many workers' files a set of error-file URIs stands for (``error.pb`` copy excluded).

    Used by the settle wait: ``error.pb`` alone counts as one writer; next to per-worker files it
    is a copy and counts as none.
    """
    others = [uri for uri in error_uris if not is_single_writer_copy(uri, output_prefix)]
    if others:
        return len(others)
    return len(error_uris)

"""Which error files a reader looks at, mirroring Flyte's ``ErrorAggregationStrategy``.

Flyte's backend has two strategies for tasks whose pods each may write an error file:
``DEFAULT`` reads the single ``error.pb`` (first writer wins, whoever that was), ``EARLIEST`` lists
every ``error*.pb`` and reports the earliest. Ours keeps the names so a propeller configuration
maps one to one, but ``EARLIEST`` orders with the robust rule of :mod:`rootcause_core.ordering`.
"""

from __future__ import annotations

import enum


class ErrorAggregationStrategy(enum.StrEnum):
    """How the reader turns a task's error files into one error."""

    DEFAULT = "default"
    EARLIEST = "earliest"

"""Keep torch's log formatter from importing ``torch._dynamo`` on the failure path.

torch's ``TorchLogsFormatter.format`` runs ``from torch._dynamo import config`` for every record
that carries an exception. The first such record in an agent is the one torch's
``MultiprocessContext._poll`` logs when a worker fails, so the agent imports the whole of
``torch._dynamo`` (about 2 s of CPU on an idle core, over 10 s on a loaded one) between tearing
the workers down and raising the root cause: measured as most of the time from a worker's fault
to the task's error.

For the duration of a launch, a filter on torch's own handlers formats the exception with the
standard library and folds it into the message, so the same text reaches the log and the
formatter finds no ``exc_info`` to send it to dynamo for. torch keeps its handlers in a private
module (:mod:`rootcause_engine.upstream.torch_logging` reads them).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from rootcause_engine.upstream.torch_logging import torch_log_handlers


class ExceptionPreformatter(logging.Filter):
    """Fold a record's exception into its message (standard-library formatting); never drops it."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is not None:
            text = record.exc_text or self._formatter.formatException(record.exc_info)
            record.msg = f"{record.getMessage()}\n{text}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


@contextlib.contextmanager
def exceptions_preformatted() -> Iterator[None]:
    """Install :class:`ExceptionPreformatter` on torch's log handlers for the block."""
    handlers = torch_log_handlers()
    preformatter = ExceptionPreformatter()
    for handler in handlers:
        handler.addFilter(preformatter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(preformatter)

"""Where torch keeps the log handlers it creates (read by :mod:`rootcause_engine.agent.torch_log_format`).

torch's ``torch._logging._internal`` module keeps every handler it installs on its loggers in a
module-level weak set, ``handlers``; there is no public way to list them.
"""

from __future__ import annotations

import logging

from rootcause_engine.upstream.versions import Symbol, require

SYMBOLS: tuple[Symbol, ...] = (
    Symbol("torch", "torch._logging._internal", "handlers", "reads, to filter torch's log handlers during a launch"),
)


def torch_log_handlers() -> list[logging.Handler]:
    """The handlers torch created for its loggers, now."""
    require(SYMBOLS)
    from torch._logging import _internal

    return [handler for handler in list(_internal.handlers) if isinstance(handler, logging.Handler)]

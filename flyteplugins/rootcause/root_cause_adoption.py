"""A Flyte 2 pod whose report names only victims takes up the root cause another pod's ``error.pb`` names.

Every failing pod of a Flyte 2 action writes the same ``error.pb``, and the last writer wins. The pods
agree on one report through the rendezvous store. But a pod that lost that store early holds only its
own victim's word. Written, that word would replace the culprit's document, which is often already
there. So such a pod first looks at ``error.pb``, for a bounded time. If a root-cause document of this
plugin is there, the pod raises the same error, so its write leaves the document unchanged. Only if
none came does it write its own. ``docs/flyte2.md`` has the details.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from flyte.errors import NonRecoverableError, RuntimeUserError
from flyteidl2.core import execution_pb2
from google.protobuf.message import DecodeError

from flyteplugins.rootcause.action_outputs import ActionOutputs
from flyteplugins.rootcause.exceptions import ERROR_CODE
from rootcause_core.ordering import Role
from rootcause_core.roles import NAMING_ROLES, role_from_marker
from rootcause_core.safe_text import exception_summary

logger = logging.getLogger(__name__)

#: Pause between two looks at ``error.pb``.
POLL_S = 0.2


@dataclasses.dataclass(frozen=True)
class NamedRootCause:
    """An ``error.pb`` of this plugin that names the job's root cause: what a pod repeats to keep it."""

    code: str
    message: str
    recoverable: bool

    def error(self) -> RuntimeUserError:
        """The exception Flyte 2's runtime turns into this same document (code, message, kind)."""
        if self.recoverable:
            return RuntimeUserError(self.code, self.message)
        return NonRecoverableError(self.message, code=self.code)


def names_only_victims(message: str) -> bool:
    """This plugin's report ``message`` names a victim as its root cause: no pod of the job told it more."""
    return role_from_marker(_first_line(message)) == Role.VICTIM


def named_root_cause(document: bytes) -> NamedRootCause | None:
    """The root cause ``document`` (an ``error.pb``) names, if it is this plugin's agreed report of
    one; ``None`` for anything else: a victim's, upstream's, a bare exception's, bytes that are no
    ``ErrorDocument``."""
    parsed = execution_pb2.ErrorDocument()
    try:
        parsed.ParseFromString(document)
    except DecodeError:
        return None
    error = parsed.error
    if error.code != ERROR_CODE or role_from_marker(_first_line(error.message)) not in NAMING_ROLES:
        return None
    return NamedRootCause(error.code, error.message, error.kind != execution_pb2.ContainerError.NON_RECOVERABLE)


def await_named_root_cause(
    read_document: Callable[[], bytes | None],
    *,
    bound_s: float,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> NamedRootCause | None:
    """Look at the action's ``error.pb`` (``read_document``) until it names a root cause, or
    ``bound_s`` passed (``None``). A look that raises is logged and looked at again: this pod's
    own document is still to be written, by the caller, whatever the store does."""
    deadline = clock() + bound_s
    while True:
        try:
            document = read_document()
            named = named_root_cause(document) if document is not None else None
            if named is not None:
                return named
        except Exception as error:  # a store that stops answering: logged, never raised
            logger.warning("could not read error.pb while waiting for the root cause: %s", exception_summary(error))
        if clock() >= deadline:
            logger.warning(
                "no error.pb naming the root cause appeared within %g s: this pod writes its victim's report", bound_s
            )
            return None
        sleep(min(poll_s, max(0.0, deadline - clock())))


def error_to_write(error: BaseException, output_path: str, bound_s: float) -> BaseException:
    """The exception this pod hands Flyte 2's runtime for ``error``: ``error`` itself, unless it is an
    agreed report naming only victims and, within ``bound_s``, the action's ``error.pb`` (under
    ``output_path``, through ``flyte.storage``) named a root cause: then that document's own error."""
    agreed = getattr(error, "agreed", None)
    if agreed is None or not names_only_victims(agreed.message):
        return error
    named = await_named_root_cause(ActionOutputs(output_path).error_document, bound_s=bound_s)
    if named is None:
        return error
    logger.warning("this pod's report names only victims and error.pb names the root cause: this pod writes the same")
    return named.error()


def _first_line(message: str) -> str:
    return message.split("\n", 1)[0]

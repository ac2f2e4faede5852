"""A pod whose document leaves the answer to another pod waits, bounded, for a document naming the root cause.

Flyte reads the error documents present when the first pod exits 0. A victim's document is stamped
late, so any root-cause document beats it. But if the victim's pod exits before the culprit's pod has
written, the victim's document is the only one Flyte finds. The console then names the wrong pod. So
a victim's pod polls the output prefix, for at most ``bound_s``, until some document can name the root
cause. ``docs/entrypoint.md`` says which documents count.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from rootcause_core.error_files import ERROR_FILE_NAME, is_error_file_name, is_file_of, listing_key_of
from rootcause_core.ordering import Role
from rootcause_core.roles import NAMING_ROLES

if TYPE_CHECKING:  # the config module imports kfpytorch and torch; the entrypoint must not need them
    from flytekitplugins_rootcause.config import ElasticRootCause
    from flytekitplugins_rootcause.entrypoint.error_documents import ErrorDocumentPlan

logger = logging.getLogger(__name__)

#: Pause between two listings of the prefix.
POLL_S = 0.2


def names_the_root_cause(name: str) -> bool:
    """A per-pod error file (not ``error.pb``, a copy of one) whose listing key is not a victim's."""
    if name == ERROR_FILE_NAME or not is_error_file_name(name):
        return False
    key = listing_key_of(name)
    return key is None or key.role in NAMING_ROLES


def await_root_cause_document(
    list_names: Callable[[], Iterable[str]],
    *,
    bound_s: float,
    with_error_pb: bool = False,
    from_worker: str | None = None,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Poll ``list_names`` (the base names under the output prefix) until one names the root cause
    (and, ``with_error_pb``, ``error.pb`` is there too: the culprit's pod creates it after its own
    file); with ``from_worker``, only a document written for that pod counts (the pod the failing
    pods agreed on). ``False`` when ``bound_s`` passed first. A listing that fails is retried until the bound:
    the pod's own document is written, so nothing is lost by waiting, and nothing by giving up."""
    deadline = clock() + bound_s
    while True:
        try:
            names = set(list_names())
            naming = [name for name in names if names_the_root_cause(name)]
            if from_worker is not None:
                naming = [name for name in naming if is_file_of(name, from_worker)]
            if naming and (not with_error_pb or ERROR_FILE_NAME in names):
                return True
        except Exception as error:  # a store that stops answering: logged, never raised
            logger.warning("could not list the output prefix while waiting for the root cause: %s", error)
        if clock() >= deadline:
            logger.warning(
                "no document naming the root cause appeared within %g s: this pod exits with its victim's document",
                bound_s,
            )
            return False
        sleep(poll_s)


def root_cause_wait_s(config: ElasticRootCause | None) -> float | None:
    """How long a victim's pod of this task waits (``RootCauseSettings.root_cause_wait_s``); ``None``
    for a task that is not an ``ElasticRootCause`` task (a plain task's pod is alone)."""
    return None if config is None else config.root_cause_wait_s


def only_a_victim_named(plan: ErrorDocumentPlan | None) -> bool:
    """This pod's document is a victim's and it wrote none for a lost pod (which would name one)."""
    return (
        plan is not None
        and plan.listing_key is not None
        and plan.listing_key.role == Role.VICTIM
        and not plan.lost_pod_documents
    )


def leaves_the_answer_to_another_pod(plan: ErrorDocumentPlan | None) -> bool:
    """This pod's document must not decide the console's answer: it names only victims, or the
    failing pods agreed the job's root cause is another pod's (an earlier, independent failure):
    it waits for that pod's document (:attr:`ErrorDocumentPlan.defers_to`) or any naming one."""
    return only_a_victim_named(plan) or (plan is not None and plan.defers_to is not None)


def list_names(prefix: str, filesystems: Any) -> list[str]:
    """The base names directly under ``prefix``: a local folder, or the store flytekit configured
    (``FileAccessProvider.get_filesystem_for_path``; its listing cache dropped first, so a file
    written by another pod since the last look is seen)."""
    if "://" not in prefix or prefix.startswith(("file://", "local://")):
        folder = prefix.split("://", 1)[-1] if "://" in prefix else prefix
        return os.listdir(folder)
    fs = filesystems.get_filesystem_for_path(prefix)
    fs.invalidate_cache(prefix)
    return [str(name).rstrip("/").rsplit("/", 1)[-1] for name in fs.ls(prefix, detail=False)]

"""Worker functions for direct ``elastic_launch`` calls (importable, so ``spawn`` workers find them)."""

from __future__ import annotations

import os
import signal
import time

from testbed.sync import READY_FILE, touch, wait_for


def fail_while_peer_ignores_sigterm(marker_dir: str, failing_rank: int) -> None:
    """Every rank but ``failing_rank`` ignores SIGTERM; ``failing_rank`` then raises."""
    if int(os.environ["RANK"]) == failing_rank:
        wait_for(os.path.join(marker_dir, READY_FILE))
        raise RuntimeError(f"first failure on rank {failing_rank}")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    touch(os.path.join(marker_dir, READY_FILE))
    time.sleep(120)

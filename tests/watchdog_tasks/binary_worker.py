"""Binary entrypoint (run by ``sys.executable``): the same fault as ``launch_workers``, no torch import.

Usage: ``python binary_worker.py MARKER_DIR FAILING_RANK``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

if __name__ == "__main__":
    marker_dir, failing_rank = sys.argv[1], int(sys.argv[2])
    ready = os.path.join(marker_dir, "sigterm-ignored")
    if int(os.environ["RANK"]) == failing_rank:
        deadline = time.monotonic() + 120
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.005)
        sys.exit(3)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(ready, "w"):
        pass
    time.sleep(120)

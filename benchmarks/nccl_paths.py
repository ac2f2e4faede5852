"""The NCCL paths on a CUDA machine: the backend chosen, the Flight Recorder read under NCCL, its cost.

Run by hand on a machine with a GPU: ``.venv/bin/python -m benchmarks.nccl_paths [--iterations 2000]``
(no GPU: it says so and stops). The test suite runs gloo on CPU only; this is where the NCCL side of
the same code is checked:

1. ``rootcause_engine.distributed`` chooses ``nccl`` and the local GPU;
2. a one-rank NCCL group (one GPU is enough) all-reduces ``--iterations`` times, with torch's
   Flight Recorder's size set (``TORCH_FR_BUFFER_SIZE``, as ``ElasticRootCause`` sets it) and left at
   torch's default; printed: the microseconds per all-reduce of 1 MiB either way, the
   position the hang diagnosis reads back (``hang_probe.collective_positions_json``: it must be the
   last all-reduce's number) and how long that read takes (what a probed worker spends answering),
   and the status each worker's progress beacon reads for the hang watch
   (``torch_worker.flight_recorder_status``: the last collective entered and completed, per group);
3. the soft restart's way out of an NCCL world (``torch_worker.abort_process_groups``) returns;
4. a loop on the soft-restart RFC's API alone: a new NCCL group made with torch's own
   ``init_process_group`` and left with its ``destroy_process_group``, both wrapped as in every
   soft-restart worker (``soft_restart.follow_process_groups``: the destroy aborts the communicators
   first), returns without an error.

Each measurement runs in a process of its own: the recorder's size is read when the group is made.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time

_CHILD = "--child"


def _child(iterations: int, buffer_entries: int) -> dict[str, object]:
    """One process: a one-rank NCCL group, ``iterations`` all-reduces, the recorder read back."""
    if buffer_entries:
        os.environ["TORCH_FR_BUFFER_SIZE"] = str(buffer_entries)
    import torch
    import torch.distributed as dist

    from rootcause_engine.distributed import default_backend, default_device
    from rootcause_engine.upstream.torch_worker import abort_process_groups, flight_recorder_status
    from rootcause_engine.worker.hang_probe import collective_positions_json

    backend, device = default_backend(), default_device(0)
    on_gpu = device.type == "cuda"
    store = dist.HashStore()
    dist.init_process_group(backend, store=store, rank=0, world_size=1, device_id=device if on_gpu else None)
    tensor = torch.ones(256 * 1024, device=device)  # 1 MiB of float32
    for _ in range(20):
        dist.all_reduce(tensor)
    if on_gpu:
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    if on_gpu:
        torch.cuda.synchronize()
    per_call_us = (time.perf_counter() - began) / iterations * 1e6
    read_began = time.perf_counter()
    positions = collective_positions_json()
    read_ms = (time.perf_counter() - read_began) * 1e3
    status_began = time.perf_counter()
    status = flight_recorder_status()  # what each worker's progress beacon reads for the hang watch
    status_us = (time.perf_counter() - status_began) * 1e6
    time.sleep(1.0)  # NCCL's watchdog thread records completions on its own time: caught up a second later?
    settled = flight_recorder_status()
    dumps = {}  # what each of torch's dump calls holds: the NCCL recorder is its own in CUDA builds
    for name in ("_dump_fr_trace", "_dump_nccl_trace"):
        call = getattr(torch._C._distributed_c10d, name, None)
        try:
            dumps[name] = "absent" if call is None else len(pickle.loads(call(True, False, False)).get("entries", []))
        except Exception as error:
            dumps[name] = f"{type(error).__name__}: {error}"[:200]
    abort_process_groups()
    rfc_only = _rfc_only_world(backend, device if on_gpu else None)
    return {
        "rfc_only": rfc_only,
        "backend": backend,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if on_gpu else "CPU",
        "torch": torch.__version__,
        "per_call_us": per_call_us,
        "positions": positions,
        "read_ms": read_ms,
        "status": {pg: list(value) for pg, value in (status or {}).items()},
        "status_us": status_us,
        "settled": {pg: list(value) for pg, value in (settled or {}).items()},
        "calls": iterations + 20,
        "dumps": dumps,
    }


def _rfc_only_world(backend: str, device: object) -> str:
    """Step 4: a group made and left with torch's own calls, wrapped as in a soft-restart worker."""
    import tempfile

    import torch
    import torch.distributed as dist

    from rootcause_engine import soft_restart
    from rootcause_engine.worker.world_events import EVENTS_DIR_VARIABLE

    os.environ[EVENTS_DIR_VARIABLE] = tempfile.mkdtemp(prefix="nccl-paths-")
    try:
        soft_restart.follow_process_groups()
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, device_id=device)
        dist.all_reduce(torch.ones(4, device=device if device is not None else "cpu"))
        dist.destroy_process_group()
    except Exception as error:
        return f"failed: {type(error).__name__}: {error}"[:300]
    return "left without an error" if not dist.is_initialized() else "failed: the group is still there"


def _run(iterations: int, buffer_entries: int) -> dict[str, object]:
    command = [sys.executable, "-m", "benchmarks.nccl_paths", _CHILD, str(iterations), str(buffer_entries)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout)[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == _CHILD:
        print(json.dumps(_child(int(sys.argv[2]), int(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--entries", type=int, default=2000, help="the Flight Recorder's ring size when on")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check here (the NCCL paths need a GPU)")
        return
    off, on = _run(args.iterations, 0), _run(args.iterations, args.entries)
    for label, result in (("torch default", off), (f"recorder {args.entries}", on)):
        if "error" in result:
            print(f"{label}: failed\n{result['error']}")
            continue
        last = [p for p in result["positions"] if isinstance(p, dict) and p.get("op", "").endswith("all_reduce")]
        seq = last[-1]["seq"] if last else None
        print(
            f"{label:<13} backend {result['backend']} on {result['device']} ({result['gpu']}, "
            f"torch {result['torch']}): {result['per_call_us']:.1f} us per 1 MiB all-reduce; last position read: "
            f"{seq} of {result['calls']} calls in {result['read_ms']:.1f} ms; the world aborted; "
            f"entries per dump call: {result['dumps']}; the progress beacon's status (entered, completed) "
            f"{result['status']} in {result['status_us']:.0f} us, {result['settled']} 1 s later; "
            f"an RFC-only loop's group: {result['rfc_only']}"
        )


if __name__ == "__main__":
    main()

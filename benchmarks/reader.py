"""Benchmark: our reader vs Flyte's sequential request pattern, on fake-gcs-server.

Run by hand (it prints a table)::

    .venv/bin/python benchmarks/reader.py                       # 1,000 and 10,000 files
    .venv/bin/python benchmarks/reader.py --sizes 1000 --delay-ms 20 --names keyed

For each size and naming, a fresh fake-gcs-server (``--backend``, memory by default) is preloaded
with that many ~2 KiB ErrorDocuments under one output prefix (``-data``: uploading 10,000 objects
one by one is slow on this server). ``keyed`` names are what the plugin's entrypoint writes (role
and time in the name, ``rootcause_core.error_files``); ``plain`` names are what writers without
listing keys leave (flytekit, or any writer that does not key its names). Then, each in a fresh subprocess so peak RSS
(``ru_maxrss``) is its own:

- ``read_error``: ``RemoteFileOutputReader.read_error()``, propeller's call: one listing, then only
  the files that can still hold the root cause (all of them with plain names);
- ``read_all``: ``RemoteFileOutputReader.read_all()``, every failure: every file downloaded,
  concurrently and bounded;
- ``sequential``: Go's ``RemoteFileOutputReader`` pattern with the same gcsfs client: list, then
  for each file a HEAD (object metadata) and a read, one request at a time.

All run directly against the server, then through a loopback TCP proxy that adds ``--delay-ms``
to every request (a real object store is tens of ms away). A sequential run with the delay on more
than ``--sequential-cap`` files is measured on the first ``cap`` files and extrapolated (marked).

Columns: wall time of the read (interpreter start-up and imports excluded), files downloaded, the
reader's CPU time, the server's CPU time during that run (from /proc: fake-gcs-server's memory
backend looks objects up linearly, so its cost per download grows with the bucket: about 5 ms at
10,000 objects), peak RSS, and the speed-up over the sequential pattern.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUCKET = "rootcause-bench"
KEY_PREFIX = "run/attempt-0"
NS = 1_000_000_000
READERS = ("read_error", "read_all", "sequential")
BASE_NS = 1_790_000_000 * NS


# ----------------------------------------------------------------------------- children


def child_rootcause(endpoint: str, max_concurrency: int, call: str) -> dict[str, object]:
    """``read_error``: propeller's call (the root cause; downloads only what can still win);
    ``read_all``: every failure, so every file is downloaded."""
    from backend_reader import RemoteFileOutputReader
    from testbed.reader_support import counting_downloads

    reader = RemoteFileOutputReader(
        f"gs://{BUCKET}/{KEY_PREFIX}",
        storage_options={"token": "anon", "endpoint_url": endpoint},
        max_concurrency=max_concurrency,
    )
    with counting_downloads() as downloads:
        started = time.perf_counter()
        if call == "read_error":
            root = reader.read_error().execution_error.worker
        else:
            failure = reader.read_all().root_cause
            root = failure.worker if failure else ""
        wall = time.perf_counter() - started
    return {"wall_s": wall, "downloads": len(downloads), "root": root}


def child_sequential(endpoint: str, limit: int | None) -> dict[str, object]:
    """Go's pattern: list error*.pb, then HEAD and read each file, one request at a time."""
    import gcsfs
    from flyteidl.core import errors_pb2

    async def run() -> dict[str, object]:
        fs = gcsfs.GCSFileSystem(token="anon", endpoint_url=endpoint, asynchronous=True, skip_instance_cache=True)
        session = await fs._set_session()
        try:
            started = time.perf_counter()
            entries = await fs._ls(f"{BUCKET}/{KEY_PREFIX}", detail=True, prefix="error", refresh=True)
            listed = time.perf_counter()
            chosen = entries if limit is None else entries[:limit]
            best: tuple[int, str] | None = None
            for entry in chosen:
                info = await fs._info(entry["name"])  # Go: Head, for existence and size
                if int(info["size"]) > 2 * 1024 * 1024:
                    continue
                document = errors_pb2.ErrorDocument()
                document.ParseFromString(await fs._cat_file(entry["name"]))
                ts = document.error.timestamp
                key = (ts.seconds * NS + ts.nanos, document.error.worker)  # missing time = 1970, as Go
                if best is None or key[0] < best[0]:
                    best = key
            done = time.perf_counter()
        finally:
            await session.close()
        per_file = (done - listed) / max(len(chosen), 1)
        wall = (listed - started) + per_file * len(entries)
        return {
            "wall_s": wall,
            "downloads": len(entries),
            "root": best[1] if best else "",
            "extrapolated_from": len(chosen) if len(chosen) < len(entries) else None,
        }

    return asyncio.run(run())


def child_main(args: argparse.Namespace) -> None:
    cpu = time.process_time()
    if args.child in ("read_error", "read_all"):
        out = child_rootcause(args.endpoint, args.max_concurrency, args.child)
    else:
        out = child_sequential(args.endpoint, args.limit)
    out["cpu_s"] = time.process_time() - cpu
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


# ----------------------------------------------------------------------------- parent


def write_data(folder: Path, size: int, names: str) -> None:
    """``size`` ErrorDocuments of ~2 KiB; the root cause is one random worker, a few are victims.

    ``names``: ``keyed`` names each file as the plugin's entrypoint does (role and time in the name,
    ``rootcause_core.error_files``); ``plain`` as writers without listing keys do.
    """
    from backend_reader.documents import listing_key_for
    from rootcause_core.error_files import keyed_file_name
    from testbed.reader_support import error_document

    rng = random.Random(size)
    target = folder / BUCKET / KEY_PREFIX
    target.mkdir(parents=True)
    root = rng.randrange(size)
    for index in range(size):
        worker = f"pod-{index:05d}"
        victim = index % 5 == 0 and index != root
        offset = 0 if index == root else rng.randrange(1, 10 * NS)
        message = ("[victim] " if victim else "[root cause] ") + "Traceback line\n" * 120
        data = error_document(message[:1900], worker=worker, timestamp_ns=BASE_NS + offset - (NS if victim else 0))
        key = listing_key_for(data) if names == "keyed" else None
        (target / keyed_file_name(f"error-{worker}-{rng.getrandbits(128):032x}", key)).write_bytes(data)


@contextlib.contextmanager
def fake_gcs(data: Path, backend: str) -> Iterator[tuple[str, int]]:
    from testbed.object_stores import fake_gcs_binary, free_port

    port = free_port()
    cmd = [fake_gcs_binary(), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
    cmd += ["-backend", backend, "-log-level", "error", "-data", str(data)]
    if backend == "filesystem":
        cmd += ["-filesystem-root", str(data.with_name(data.name + "-fs"))]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            url = f"{endpoint}/storage/v1/b/{BUCKET}/o?maxResults=1"
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5):
                break
            time.sleep(0.2)
        yield endpoint, server.pid
    finally:
        server.terminate()
        server.wait(10)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_child(kind: str, endpoint: str, server_pid: int, extra: list[str]) -> dict[str, object]:
    env = {**os.environ, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "STORAGE_EMULATOR_HOST": endpoint}
    before = cpu_seconds(server_pid)
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--endpoint", endpoint, *extra],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    out["server_cpu_s"] = cpu_seconds(server_pid) - before
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--max-concurrency", type=int, default=64)
    parser.add_argument("--backend", choices=["memory", "filesystem"], default="memory")
    parser.add_argument("--names", choices=["keyed", "plain"], nargs="+", default=["keyed", "plain"])
    parser.add_argument("--delays-ms", type=float, nargs="+", default=None, help="override: delays to run")
    parser.add_argument("--sequential-cap", type=int, default=500, help="files a delayed sequential run reads")
    parser.add_argument("--child", choices=[*READERS], help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return

    print(f"load average at start: {os.getloadavg()}, cpus: {os.cpu_count()}, backend: {args.backend}", flush=True)
    for size in args.sizes:
        for names in args.names:
            data = Path(tempfile.mkdtemp(prefix="rootcause-bench-"))
            try:
                write_data(data, size, names)
                started = time.perf_counter()
                with fake_gcs(data, args.backend) as (endpoint, pid):
                    loaded = time.perf_counter() - started
                    print(f"{size} files ({names} names) loaded into fake-gcs-server in {loaded:.1f} s", flush=True)
                    for delay_ms in args.delays_ms if args.delays_ms is not None else (0.0, args.delay_ms):
                        outs = measure(size, delay_ms, endpoint, pid, args)
                        baseline = float(outs["sequential"]["wall_s"])
                        for reader, out in outs.items():
                            print_row(size, names, delay_ms, reader, out, baseline / float(out["wall_s"]))
            finally:
                shutil.rmtree(data, ignore_errors=True)
                shutil.rmtree(data.with_name(data.name + "-fs"), ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")


def measure(
    size: int, delay_ms: float, endpoint: str, server_pid: int, args: argparse.Namespace
) -> dict[str, dict[str, object]]:
    """Run the three readers once against the server, through a delaying proxy when asked."""
    from testbed.reader_support import LoopbackProxy

    with contextlib.ExitStack() as stack:
        url = endpoint
        if delay_ms:
            proxy = LoopbackProxy(int(endpoint.rsplit(":", 1)[1]), delay_s=delay_ms / 1000)
            url = stack.enter_context(proxy).url
        concurrency = ["--max-concurrency", str(args.max_concurrency)]
        limit = ["--limit", str(args.sequential_cap)] if delay_ms and size > args.sequential_cap else []
        return {
            "read_error": run_child("read_error", url, server_pid, concurrency),
            "read_all": run_child("read_all", url, server_pid, concurrency),
            "sequential": run_child("sequential", url, server_pid, limit),
        }


def print_row(
    size: int, names: str, delay_ms: float, reader: str, out: dict[str, object], speedup: float
) -> None:
    if not getattr(print_row, "header", False):
        print(
            f"{'files':>6} {'names':<6} {'delay':>6} {'reader':<11} {'wall s':>8} {'downloads':>9} {'cpu s':>7} "
            f"{'server cpu s':>12} {'peak RSS MB':>11} {'speed-up':>8}  root cause"
        )
        print_row.header = True  # type: ignore[attr-defined]
    note = f" (extrapolated from {out['extrapolated_from']} files)" if out.get("extrapolated_from") else ""
    ratio = f"{speedup:7.1f}x" if reader != "sequential" else ""
    print(
        f"{size:>6} {names:<6} {delay_ms:>4.0f}ms {reader:<11} {float(out['wall_s']):>8.2f} {int(out['downloads']):>9} "
        f"{float(out['cpu_s']):>7.2f} {float(out['server_cpu_s']):>12.2f} {float(out['peak_rss_mb']):>11.1f} "
        f"{ratio:>8}  {out['root']}{note}",
        flush=True,
    )


if __name__ == "__main__":
    main()

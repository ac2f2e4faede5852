"""Benchmark: our reader vs Flyte's sequential request pattern, on fake-gcs-server.

Run by hand (it prints a table)::

    .venv/bin/python benchmarks/reader.py                       # 1,000 and 10,000 files
    .venv/bin/python benchmarks/reader.py --sizes 1000 --delay-ms 20

For each size, a fresh fake-gcs-server (``--backend``, memory by default) is preloaded with that many ~2 KiB
ErrorDocuments under one output prefix (``-data``: uploading 10,000 objects one by one is slow on
this server). Then, each in a fresh subprocess so peak RSS (``ru_maxrss``) is its own:

- ``rootcause``: ``backend_reader.RemoteFileOutputReader`` (listing, concurrent bounded reads);
- ``sequential``: Go's ``RemoteFileOutputReader`` pattern with the same gcsfs client: list, then
  for each file a HEAD (object metadata) and a read, one request at a time.

Both run directly against the server, then through a loopback TCP proxy that adds ``--delay-ms``
to every request (a real object store is tens of ms away). A sequential run with the delay on more
than ``--sequential-cap`` files is measured on the first ``cap`` files and extrapolated (marked).

Columns: wall time of the read (interpreter start-up and imports excluded), the reader's CPU
time, the server's CPU time during that run (from /proc: fake-gcs-server's memory backend looks
objects up linearly, so its cost per request grows with the bucket), and peak RSS.
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
BASE_NS = 1_790_000_000 * NS


# ----------------------------------------------------------------------------- children


def child_rootcause(endpoint: str, max_concurrency: int) -> dict[str, object]:
    from backend_reader import RemoteFileOutputReader

    reader = RemoteFileOutputReader(
        f"gs://{BUCKET}/{KEY_PREFIX}",
        storage_options={"token": "anon", "endpoint_url": endpoint},
        max_concurrency=max_concurrency,
    )
    started = time.perf_counter()
    result = reader.read_all()
    wall = time.perf_counter() - started
    root = result.root_cause
    return {"wall_s": wall, "files": len(result.failures) + len(result.skipped), "root": root.worker if root else ""}


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
            "files": len(entries),
            "root": best[1] if best else "",
            "extrapolated_from": len(chosen) if len(chosen) < len(entries) else None,
        }

    return asyncio.run(run())


def child_main(args: argparse.Namespace) -> None:
    cpu = time.process_time()
    if args.child == "rootcause":
        out = child_rootcause(args.endpoint, args.max_concurrency)
    else:
        out = child_sequential(args.endpoint, args.limit)
    out["cpu_s"] = time.process_time() - cpu
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


# ----------------------------------------------------------------------------- parent


def write_data(folder: Path, size: int) -> None:
    """``size`` ErrorDocuments of ~2 KiB; the root cause is one random worker, a few are victims."""
    from tests.reader_support import error_document

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
        (target / f"error-{worker}-{rng.getrandbits(128):032x}.pb").write_bytes(data)


@contextlib.contextmanager
def fake_gcs(data: Path, backend: str) -> Iterator[tuple[str, int]]:
    from tests.object_stores import fake_gcs_binary, free_port

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
    parser.add_argument("--delays-ms", type=float, nargs="+", default=None, help="override: delays to run")
    parser.add_argument("--sequential-cap", type=int, default=500, help="files a delayed sequential run reads")
    parser.add_argument("--child", choices=["rootcause", "sequential"], help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return

    from tests.reader_support import LoopbackProxy

    print(f"load average at start: {os.getloadavg()}, cpus: {os.cpu_count()}, backend: {args.backend}", flush=True)
    rows = []
    for size in args.sizes:
        data = Path(tempfile.mkdtemp(prefix="rootcause-bench-"))
        try:
            write_data(data, size)
            started = time.perf_counter()
            with fake_gcs(data, args.backend) as (endpoint, pid):
                print(f"{size} files loaded into fake-gcs-server in {time.perf_counter() - started:.1f} s", flush=True)
                for delay_ms in args.delays_ms if args.delays_ms is not None else (0.0, args.delay_ms):
                    with contextlib.ExitStack() as stack:
                        url = endpoint
                        if delay_ms:
                            proxy = stack.enter_context(
                                LoopbackProxy(int(endpoint.rsplit(":", 1)[1]), delay_s=delay_ms / 1000)
                            )
                            url = proxy.url
                        ours = run_child("rootcause", url, pid, ["--max-concurrency", str(args.max_concurrency)])
                        limit = ["--limit", str(args.sequential_cap)] if delay_ms and size > args.sequential_cap else []
                        seq = run_child("sequential", url, pid, limit)
                    for name, out in (("rootcause", ours), ("sequential", seq)):
                        rows.append((size, delay_ms, name, out, float(seq["wall_s"]) / float(ours["wall_s"])))
                        print_row(*rows[-1])
        finally:
            shutil.rmtree(data, ignore_errors=True)
            shutil.rmtree(data.with_name(data.name + "-fs"), ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")


def print_row(size: int, delay_ms: float, name: str, out: dict[str, object], speedup: float) -> None:
    if not getattr(print_row, "header", False):
        print(
            f"{'files':>6} {'delay':>6} {'reader':<11} {'wall s':>8} {'cpu s':>7} {'server cpu s':>12} "
            f"{'peak RSS MB':>11} {'speed-up':>8}  root cause"
        )
        print_row.header = True  # type: ignore[attr-defined]
    note = f" (extrapolated from {out['extrapolated_from']} files)" if out.get("extrapolated_from") else ""
    ratio = f"{speedup:7.1f}x" if name == "rootcause" else ""
    print(
        f"{size:>6} {delay_ms:>4.0f}ms {name:<11} {float(out['wall_s']):>8.2f} {float(out['cpu_s']):>7.2f} "
        f"{float(out['server_cpu_s']):>12.2f} {float(out['peak_rss_mb']):>11.1f} {ratio:>8}  {out['root']}{note}",
        flush=True,
    )


if __name__ == "__main__":
    main()

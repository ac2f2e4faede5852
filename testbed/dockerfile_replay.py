"""Replays a Dockerfile's build steps into a folder, without a Docker daemon.

A task image that does not build is found by the first user who builds it, on a cluster, unless
something builds it first. There is no daemon on the machines that run the suite, so this module
does what the daemon would do with the steps that concern the project, into a temporary folder
that stands for the image's filesystem (the *root*):

- ``ARG`` and ``ENV`` set variables (an absolute path, ``/opt/venv``, lands under the root);
- ``WORKDIR`` moves into the root;
- ``COPY`` takes files from the build context as Docker does: the context's ``.dockerignore``
  applied, a folder's *contents* copied into the destination, symbolic links kept as links (so a
  link that points outside what was copied breaks here as it breaks in the image);
- ``RUN`` runs with ``/bin/sh -c`` in the working folder, with the variables set so far.

What it cannot reproduce it borrows, and says so: the base image is this machine's Python (the
replay refuses a ``FROM python:X.Y`` of another version), and ``pip`` is offline. Every package
index is off (``PIP_NO_INDEX``): requirements are satisfied from the test environment, whose
``site-packages`` every virtualenv created under the root sees *after* its own (a ``.pth`` file),
and build back-ends (setuptools, wheel) come from the wheelhouse ``make venv`` fills, so each
distribution still builds in pip's isolated environment exactly as in the image. pip also refuses
to install outside a virtualenv (``PIP_REQUIRE_VIRTUALENV``), so a step can never change the
interpreter that runs the tests. ``FROM``'s other stages, ``USER``, ``CMD`` and friends change
nothing a test of the installed code looks at and are recorded only.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

#: Where ``make venv`` puts the build back-ends' wheels (``pip download``), for offline builds.
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"
_BORROWED_PTH = "zz-replay-test-environment.pth"
_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


class ReplayError(RuntimeError):
    """A build step failed or cannot be replayed; the message names the Dockerfile line."""


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, continuation lines joined; ``line`` is where it starts."""

    keyword: str
    arguments: str
    line: int

    def flags_and_words(self) -> tuple[dict[str, str], list[str]]:
        """``COPY --chown=a b c`` -> ({'chown': 'a'}, ['b', 'c']); the JSON form is accepted too."""
        text = self.arguments.strip()
        flags: dict[str, str] = {}
        words = shlex.split(text)
        while words and words[0].startswith("--"):
            name, _, value = words.pop(0)[2:].partition("=")
            flags[name] = value
        if words and " ".join(words).startswith("["):
            words = json.loads(" ".join(words))
        return flags, words


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile, in order (comments and parser directives dropped)."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].rstrip())
            continue
        pending.append(stripped)
        keyword, _, arguments = " ".join(pending).strip().partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
        pending = []
    if pending:
        raise ReplayError(f"line {start}: the Dockerfile ends inside a continued instruction")
    return instructions


def build_arguments(dockerfile: Path) -> dict[str, str]:
    """The defaults of a Dockerfile's ``ARG`` lines (``docker build --build-arg`` overrides them)."""
    arguments: dict[str, str] = {}
    for instruction in parse_dockerfile(dockerfile.read_text()):
        name, has_default, default = instruction.arguments.partition("=")
        if instruction.keyword == "ARG" and has_default:
            arguments[name.strip()] = default.strip().strip('"')
    return arguments


@dataclass(frozen=True)
class DockerIgnore:
    """``.dockerignore`` rules: Go ``filepath.Match`` patterns with ``**``, ``!`` re-includes, the
    last matching rule winning. A path whose parent folder is excluded is excluded."""

    rules: tuple[tuple[bool, str], ...] = ()

    @classmethod
    def of_context(cls, context: Path) -> DockerIgnore:
        path = context / ".dockerignore"
        if not path.exists():
            return cls()
        rules = []
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            include = line.startswith("!")
            pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
            rules.append((include, pattern))
        return cls(tuple(rules))

    def excluded(self, relative: str) -> bool:
        parts = Path(relative).parts
        return any(self._excluded_itself("/".join(parts[:depth])) for depth in range(1, len(parts) + 1))

    def _excluded_itself(self, relative: str) -> bool:
        verdict = False
        for include, pattern in self.rules:
            if _matches(pattern, relative):
                verdict = not include
        return verdict


def _matches(pattern: str, relative: str) -> bool:
    """Go's ``filepath.Match`` per path element, with ``**`` matching any number of elements."""
    return _match_parts(pattern.split("/"), relative.split("/"))


def _match_parts(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match_parts(pattern[1:], parts[skip:]) for skip in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match_parts(pattern[1:], parts[1:])


@dataclass
class DockerfileReplay:
    """The state of one replay: the root standing for the image, the variables, the working folder."""

    context: Path
    root: Path
    variables: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ignore = DockerIgnore.of_context(self.context)
        self.root.mkdir(parents=True, exist_ok=True)
        base_bin = self.root / "usr/local/bin"
        base_bin.mkdir(parents=True, exist_ok=True)
        for name in ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}"):
            link = base_bin / name
            if not link.exists():
                link.symlink_to(_base_interpreter())
        self.variables.setdefault("PATH", f"{base_bin}:/usr/bin:/bin")
        self.variables.setdefault("HOME", str(self.root / "root"))

    def in_root(self, path: str) -> Path:
        """An image path (absolute, or relative to the working folder) as a path under the root."""
        absolute = path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"
        return self.root / os.path.normpath(absolute).lstrip("/")

    def expand(self, text: str) -> str:
        return _VARIABLE.sub(lambda m: self.variables.get(m["braced"] or m["bare"], ""), text)

    def replay(self, dockerfile: Path) -> None:
        for instruction in parse_dockerfile(dockerfile.read_text()):
            handler = getattr(self, f"_{instruction.keyword.lower()}", None)
            self.log.append(f"{instruction.line}: {instruction.keyword} {instruction.arguments}")
            if handler is not None:
                handler(instruction)

    def _from(self, instruction: Instruction) -> None:
        image = instruction.arguments.split()[0]
        match = re.fullmatch(r"(?:docker\.io/)?(?:library/)?python:(\d+)\.(\d+)\S*", image)
        if match and (int(match[1]), int(match[2])) != sys.version_info[:2]:
            raise ReplayError(
                f"line {instruction.line}: {image} is Python {match[1]}.{match[2]}; this replay borrows the "
                f"test interpreter, Python {sys.version_info.major}.{sys.version_info.minor}"
            )

    def _arg(self, instruction: Instruction) -> None:
        name, has_default, default = instruction.arguments.partition("=")
        if has_default and name not in self.variables:
            self.variables[name] = self._value(default)

    def _env(self, instruction: Instruction) -> None:
        words = shlex.split(instruction.arguments)
        if len(words) >= 2 and "=" not in words[0]:  # the legacy `ENV NAME value` form
            words = [f"{words[0]}={' '.join(words[1:])}"]
        for word in words:
            name, _, value = word.partition("=")
            self.variables[name] = self._value(value)

    def _value(self, raw: str) -> str:
        """A variable's value: expanded, and rebased under the root when it is an absolute path."""
        value = self.expand(raw.strip().strip('"'))
        return str(self.in_root(value)) if raw.strip().strip('"').startswith("/") else value

    def _workdir(self, instruction: Instruction) -> None:
        target = self.expand(instruction.arguments)
        self.in_root(target).mkdir(parents=True, exist_ok=True)
        self.workdir = target if target.startswith("/") else f"{self.workdir.rstrip('/')}/{target}"

    def _copy(self, instruction: Instruction) -> None:
        flags, words = instruction.flags_and_words()
        if "from" in flags:
            raise ReplayError(f"line {instruction.line}: COPY --from another stage is not replayed")
        *sources, destination = [self.expand(word) for word in words]
        target = self.in_root(destination)
        if len(sources) > 1 and not destination.endswith("/"):
            raise ReplayError(f"line {instruction.line}: COPY of several sources needs a folder ending in '/'")
        for source in sources:
            self._copy_one(instruction, source, target, into_folder=destination.endswith("/"))

    _add = _copy

    def _copy_one(self, instruction: Instruction, source: str, target: Path, *, into_folder: bool) -> None:
        relative = os.path.normpath(source).lstrip("/")
        path = self.context / relative
        if relative != "." and (not os.path.lexists(path) or self.ignore.excluded(relative)):
            raise ReplayError(f"line {instruction.line}: COPY {source}: not in the build context (or .dockerignore'd)")
        if path.is_dir() and not path.is_symlink():
            self._copy_tree(path, relative, target)
            return
        destination = target / path.name if into_folder or target.is_dir() else target
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination, follow_symlinks=False)

    def _copy_tree(self, folder: Path, relative: str, target: Path) -> None:
        """A folder's contents, minus what ``.dockerignore`` excludes, links kept as links."""
        target.mkdir(parents=True, exist_ok=True)
        for entry in sorted(folder.iterdir()):
            entry_relative = entry.name if relative == "." else f"{relative}/{entry.name}"
            if self.ignore.excluded(entry_relative):
                continue
            if entry.is_dir() and not entry.is_symlink():
                self._copy_tree(entry, entry_relative, target / entry.name)
            else:
                shutil.copy2(entry, target / entry.name, follow_symlinks=False)

    def _run(self, instruction: Instruction) -> None:
        _, words = instruction.flags_and_words()  # --mount and friends need a daemon: ignored
        text = instruction.arguments.strip()
        while text.startswith("--"):
            text = text.split(maxsplit=1)[1] if " " in text else ""
        command = words if text.startswith("[") else ["/bin/sh", "-c", text]
        environment = self.variables | _offline_pip(self.root)
        completed = subprocess.run(
            command, cwd=self.in_root(self.workdir), env=environment, capture_output=True, text=True,
            timeout=600, check=False,
        )
        self.log.append(completed.stdout + completed.stderr)
        if completed.returncode != 0:
            raise ReplayError(
                f"line {instruction.line}: RUN {text} exited {completed.returncode}:\n"
                f"{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}"
            )
        self._borrow_test_environment()

    def _borrow_test_environment(self) -> None:
        """Every virtualenv under the root sees the test environment's packages after its own."""
        borrowed = "\n".join(dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]))
        for config in self.root.rglob("pyvenv.cfg"):
            for site_packages in config.parent.glob("lib/python*/site-packages"):
                pth = site_packages / _BORROWED_PTH
                if not pth.exists():
                    pth.write_text(borrowed + "\n")


def _offline_pip(root: Path) -> dict[str, str]:
    """pip with every index off, build back-ends from the wheelhouse, only inside a virtualenv."""
    if not any(WHEELHOUSE.glob("setuptools-*.whl")):
        raise ReplayError(f"no setuptools wheel in {WHEELHOUSE}: `make venv` downloads the build back-ends there")
    return {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(WHEELHOUSE),
        "PIP_REQUIRE_VIRTUALENV": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_CACHE_DIR": str(root / ".replay-pip-cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _base_interpreter() -> str:
    """The interpreter a ``python:X.Y`` image would have: this machine's, outside any virtualenv."""
    return getattr(sys, "_base_executable", sys.executable)

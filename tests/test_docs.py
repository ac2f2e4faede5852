"""The README and ``docs/`` state current facts: no development history, no dead paths, one figure per benchmark.

Why: the docs are read as a description of the code as it is. A line like "session 12, final code"
or "before the fix" tells a reader about a past they cannot see and leaves them to guess which of
several figures holds; a path to a test or module that moved sends them nowhere. These checks read
the Markdown files only (no imports of the packages, no processes), so they run in well under a
second and catch such drift at the next ``make test``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MARKDOWN_FILES = [README, *DOCS]

#: Wording that only tells how the project was developed. Each alternative is narrow enough that
#: technical text cannot trip it: a number must follow "session", "stop" or "run #" (a "TCP
#: session" or "stop the workers" is fine); a commit hash needs 7 to 40 hex characters with both a
#: digit and a letter, standing alone (a "0x7fdf..." address or an all-digit nanosecond time is
#: not one). An upstream issue is cited by its URL, which does not match ``issue #N``.
HISTORY_WORDING = re.compile(
    r"""
      \bsessions?\ \d+
    | \bstop\ \d+
    | \brun\ \#\d+
    | \bfinal\ code\b
    | \bprevious\ main\b
    | \bhead\ of\ main\b
    | \b(?:before|after)\ the\ fix\b
    | \b(?:was|were|now)\ (?:fixed|closed)\b
    | \bissue\ \#\d+
    | (?<![\w.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w.])
    """,
    re.IGNORECASE | re.VERBOSE,
)

#: Top-level folders of this repository; a path starting with one of them is checked to exist.
REPO_FOLDERS = (
    "tests", "benchmarks", "docs", "examples", "flytekitplugins_rootcause", "rootcause_core", "rootcause_engine",
    "backend_reader", "testbed", "distributions", "flyteplugins",
)
REPO_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(REPO_FOLDERS)})/[\w./-]*)(.?)")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")

#: docs/architecture.md is checked too: it passed both checks when this test was written. Drop it
#: from here only with a reason.
PATH_CHECKED_FILES = MARKDOWN_FILES


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("document", MARKDOWN_FILES, ids=relative)
def test_no_development_history_wording(document: Path) -> None:
    """A doc says what the code does and what a figure is, never which session or commit produced it."""
    found = [
        f"{relative(document)}:{number}: {match.group(0)!r} in {line.strip()[:100]!r}"
        for number, line in enumerate(document.read_text().splitlines(), start=1)
        for match in HISTORY_WORDING.finditer(line)
    ]
    assert found == []


@pytest.mark.parametrize(
    "text",
    [
        "session 12, final code",
        "stop 25's CI run",
        "(previous main: a worker stalls)",
        "head of main, ba0cfc8",
        "SIGSEGV every time, before the fix",
        "The stall of issue #11",
        "a hang of its own, now closed",
    ],
)
def test_the_history_pattern_finds_history(text: str) -> None:
    """The pattern is only worth something if it fires on the wording it is meant to keep out."""
    assert HISTORY_WORDING.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "a TCP session to the store",
        "stop the surviving workers",
        "run 20 trials",
        "Current thread 0x00007fdfd2830b80 (most recent call first)",
        "error-train-worker-1-3f2b...e9.rc1c1790000000123456789.pb",
        "a timeout of 1800000 ms",
        "gcsfs pipe_file(mode='create')",
    ],
)
def test_the_history_pattern_spares_technical_text(text: str) -> None:
    """Text about sessions, stopping, runs, addresses and times without a history marker stays allowed."""
    assert not HISTORY_WORDING.search(text)


def mentioned_paths(document: Path) -> list[tuple[int, str, Path]]:
    """(line, as written, where it points) for every repository path the document names.

    Paths under a top-level folder of the repository, wherever they are written (backticks, code
    blocks, prose) resolve from the repository root; a Markdown link's target resolves from the
    document's folder, as GitHub resolves it. Globs and templates (``docs/*.md``, ``tests/<name>``)
    name no single file and are skipped, as are web links and in-page anchors.
    """
    found: list[tuple[int, str, Path]] = []
    for number, line in enumerate(document.read_text().splitlines(), start=1):
        for match in REPO_PATH.finditer(line):
            path, following = match.group(1).rstrip(".,"), match.group(2)
            if following in ("*", "<", "{"):
                continue
            found.append((number, path, ROOT / path))
        for match in MARKDOWN_LINK.finditer(line):
            target = match.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            found.append((number, target, document.parent / target))
    return found


@pytest.mark.parametrize("document", PATH_CHECKED_FILES, ids=relative)
def test_every_path_the_docs_name_exists(document: Path) -> None:
    """A test, module, benchmark or doc that a doc points to is where it says, after any move."""
    missing = [f"{relative(document)}:{number}: {written}" for number, written, path in mentioned_paths(document)
               if not path.exists()]
    assert missing == []


def benchmark_modules() -> set[str]:
    """The modules of ``benchmarks/`` that someone runs for figures: those with a ``__main__`` block.

    Helpers (``cpu_load``, ``elastic_scenarios``, ``__init__``) have none, so a new benchmark is
    counted the moment it can be run, and a helper never is.
    """
    runnable = set()
    for path in (ROOT / "benchmarks").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                runnable.add(path.stem)
    return runnable


def measured_table() -> list[list[str]]:
    """The cells of each body row of the first table in ``docs/benchmarks.md``'s ``## Measured`` section."""
    section = (ROOT / "docs" / "benchmarks.md").read_text().split("\n## Measured\n", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return table[2:]  # header and its separator


def test_measured_has_one_row_per_benchmark_with_its_command() -> None:
    """One current row per benchmark (and one for the suite), each with the command that reproduces it.

    A row's first cell names its benchmark in backticks; a benchmark with two rows means a figure and
    its superseded predecessor side by side, one with none means figures nobody can find; a row
    without its command is a figure nobody can reproduce.
    """
    expected = benchmark_modules() | {"make test"}
    assert {"e2e", "stress_teardown", "reader"} <= expected  # the discovery itself works
    named = []
    for cells in measured_table():
        names = [name for name in re.findall(r"`([^`]+)`", cells[0]) if name in expected]
        assert len(names) == 1, f"a Measured row must name exactly one benchmark first: {cells[0]!r}"
        name = names[0]
        named.append(name)
        command = cells[-1]
        reproduces = name in command if name == "make test" else re.search(rf"benchmarks[./]{name}\b", command)
        assert reproduces, f"the {name!r} row's last cell must be the command that measures it: {command!r}"
    assert sorted(named) == sorted(expected)


#: The README is a five-minute read: what the plugin is, install, use (both flavours), what a failure
#: looks like, the two commands, links. Details live in ``docs/``.
README_MAX_WORDS = 1200
README_MAX_PARAGRAPH_WORDS = 120
README_MAX_LINE_CHARS = 120


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line outside fenced code blocks (the fences themselves dropped)."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def is_table_row(line: str) -> bool:
    return line.lstrip().startswith("|")


def word_count(text: str) -> int:
    """Words outside fenced code blocks: headings, prose, lists and tables all count; Markdown's own marks
    (a list's ``-``, a table's ``|``) do not."""
    return sum(len(re.findall(r"\S*\w\S*", line)) for _, line in prose(text))


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph outside code: runs of lines up to a blank line, a heading, a
    table or the next list item (each item is a paragraph of its own)."""
    found: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    for number, line in prose(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or is_table_row(line):
            current = None
            continue
        if current is None or re.match(r"(?:[-*+]|\d+\.)\s", stripped):
            current = []
            found.append((number, current))
        current.append(stripped)
    return [(number, " ".join(lines)) for number, lines in found]


def test_the_readme_is_a_five_minute_read() -> None:
    """At most 1,200 words outside code blocks; what does not fit belongs in ``docs/``."""
    words = word_count(README.read_text())
    assert words <= README_MAX_WORDS, f"README.md has {words} words outside code blocks"


def test_no_readme_paragraph_is_a_wall_of_text() -> None:
    """No README paragraph (or list item) over 120 words."""
    long = [f"README.md:{number}: {len(paragraph.split())} words: {paragraph[:80]!r}"
            for number, paragraph in paragraphs(README.read_text())
            if len(paragraph.split()) > README_MAX_PARAGRAPH_WORDS]
    assert long == []


def test_no_readme_line_is_over_120_characters_outside_code_and_tables() -> None:
    """Prose lines wrap; code blocks and table rows may be as long as they need."""
    long = [f"README.md:{number}: {len(line)} characters" for number, line in prose(README.read_text())
            if len(line) > README_MAX_LINE_CHARS and not is_table_row(line)]
    assert long == []


def test_the_readme_limits_measure_what_they_say() -> None:
    """Code blocks are left out of every limit, tables out of the line limit, and list items are paragraphs."""
    text = "\n".join([
        "# Title",
        "",
        "one two three",
        "four",
        "",
        "```bash",
        "make demo   # " + "x " * 200,
        "```",
        "",
        "| a | " + "cell " * 100 + "|",
        "|---|---|",
        "",
        "- first item",
        "  continued",
        "- second item",
    ])
    assert word_count(text) == 1 + 4 + 101 + 3 + 2  # "#", "|" and "-" are no words
    assert [number for number, _ in paragraphs(text)] == [3, 13, 15]
    assert paragraphs(text)[1][1] == "- first item continued"
    long = [number for number, line in prose(text) if len(line) > README_MAX_LINE_CHARS and not is_table_row(line)]
    assert long == []


def test_the_readmes_two_commands_are_the_makefiles() -> None:
    """The README's ``make demo`` and ``make test`` are the Makefile's targets that CI runs (``.ci/run``)."""
    readme = README.read_text()
    assert "\nmake demo   # " in readme and "\nmake test   # " in readme
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: ", makefile, re.MULTILINE) and re.search(r"^test: ", makefile, re.MULTILINE)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped (``_`` and ``-`` kept), spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(document: Path) -> set[str]:
    """Every heading's anchor in a Markdown file (a repeated heading gets ``-1``, ``-2``, ... as on GitHub)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose(document.read_text()):
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            anchor = github_anchor(heading.group(1))
            found.add(anchor if anchor not in seen else f"{anchor}-{seen[anchor]}")
            seen[anchor] = seen.get(anchor, 0) + 1
    return found


ANCHOR_CHECKED_FILES = MARKDOWN_FILES


@pytest.mark.parametrize("document", ANCHOR_CHECKED_FILES, ids=relative)
def test_every_anchor_the_docs_link_to_exists(document: Path) -> None:
    """A link to a section (``settings.md#lost_after_s-...``) lands on it, after any move or rename."""
    broken = []
    for number, line in prose(document.read_text()):
        for match in MARKDOWN_LINK.finditer(line):
            target = match.group(1)
            if "#" not in target or re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path, anchor = target.split("#", 1)
            linked = document.parent / path if path else document
            if linked.is_file() and anchor not in anchors(linked):
                broken.append(f"{relative(document)}:{number}: {target}")
    assert broken == []


REPOSITORY_URL = "https://github.com/flyteorg/flytekitplugins-rootcause"
DISTRIBUTION_READMES = sorted((ROOT / "distributions").glob("*README*.md")) + sorted(
    (ROOT / "distributions").glob("*/README.md"))


@pytest.mark.parametrize("document", DISTRIBUTION_READMES, ids=relative)
def test_distribution_readmes_link_only_to_the_web(document: Path) -> None:
    """A distribution's README is its page on a package index, where a relative link leads nowhere: every
    link is absolute, one into this repository names a file (and section) that exists, and a shipped
    distribution's page names no checkout-only command (``tests/test_wheels.py`` checks the built wheels)."""
    assert len(DISTRIBUTION_READMES) >= 6  # the flytekit plugin's and each distribution's own
    text = document.read_text()
    wrong = []
    for number, line in prose(text):
        for target in MARKDOWN_LINK.findall(line) + re.findall(r"<(https?://[^>\s]+)>", line):
            if not target.startswith("https://"):
                wrong.append(f"{relative(document)}:{number}: {target} (not absolute)")
                continue
            if not target.startswith(REPOSITORY_URL):
                continue
            rest = target[len(REPOSITORY_URL):]
            path, _, anchor = rest.partition("#")
            if path in ("", "/"):
                linked = README
            elif path.startswith("/blob/main/"):
                linked = ROOT / path.removeprefix("/blob/main/")
            else:
                continue
            if not linked.is_file():
                wrong.append(f"{relative(document)}:{number}: {target} (no such file)")
            elif anchor and anchor != "readme" and anchor not in anchors(linked):
                wrong.append(f"{relative(document)}:{number}: {target} (no such section)")
    repo_only = ["](./", "](docs/", "](../"]
    if document.parent.name != "rootcause-harness":  # never published: it may name the Makefile's commands
        repo_only += ["make demo", "make test", ".venv/"]
    wrong += [f"{relative(document)}: {written!r}" for written in repo_only if written in text]
    assert wrong == []

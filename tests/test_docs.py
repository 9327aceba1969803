"""Every Python block of README.md and docs/*.md runs, as a reader would paste it.

Each fenced block tagged ``python`` (or ``py``) is one test, named by its file and the
line of its first code line (``docs/fencing.md:39``). The block runs as a script in a
fresh interpreter (``__name__ == "__main__"``), compiled under the Markdown file's own
path and line numbers, so a failure's traceback points at the line of the Markdown file.
New pages are picked up by themselves.

**Which server.** The block runs against a server emptied before it, as a reader's fresh
Redis would be: the test session's private server, or, when ``REDIS_URL`` names a shared
one, a private server started for the pages (the pages name fixed keys such as
``stock:{sale-42}``; on a server that is never emptied, what one run left, a fenced write's
newest token for one, would refuse the next run's). Examples address Redis the way users do,
so before a block runs, and without changing its line numbers:

* every ``redis://…`` URL in it becomes the test server's URL;
* every call ``Redis(…)`` (``redis.Redis()``, ``redis.asyncio.Redis(decode_responses=True)``)
  becomes ``Redis.from_url(<test url>, …)``;
* ``REDIS_URL`` in its environment is the test server's URL.

A block that would still reach another server (``localhost``, ``127.0.0.1`` or ``:6379``
left in it, or ``host=``/``port=``) fails with that reason instead of running, so no example
ever talks to a Redis that happens to run on the machine.

**Markers.** An HTML comment right before a block (blank lines between are fine; they are
invisible on a rendered page) changes how it runs:

* ``<!-- doc-test: skip (reason) -->``: not run; the test is reported as skipped with
  the reason, which is required.
* ``<!-- doc-test: needs module, other -->``: skipped (with that reason) unless those
  modules can be imported, for examples of frameworks redlease does not install.
* ``<!-- doc-test: pytest -->``: the block is a test module; it runs under pytest (with
  redlease's plugin, ``REDIS_URL`` set to the test server), and must pass.
* ``<!-- doc-test: servers N -->``: the block names N distinct ``redis://`` URLs (Redlock's
  independent masters); each gets a private server of its own, started for the session.
* ``<!-- doc-test: continue -->``: runs after the previous Python block of the same file, in
  the same interpreter (that block and the ones it continues run first).
* ``<!-- doc-test: setup`` … ``-->``: the comment's remaining lines are Python run before the
  block (after what it continues), for what a page leaves to the reader (a database
  connection, an existing key).

Several markers may stand before one block. A ``doc-test:`` comment that is not one of these,
or that no Python block follows, fails the test ``test_markers_are_understood``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
BLOCK_TIMEOUT_S = 90
LANGUAGES = {"python", "py", "python3"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"<!--\s*doc-test:(?P<body>.*?)-->", re.DOTALL)
_URL = re.compile(r"rediss?://[^\s\"'`)]+")
_REDIS_CALL = re.compile(r"\bRedis\(")
_ELSEWHERE = re.compile(r"localhost|127\.0\.0\.1|:6379\b|[(,]\s*(?:host|port)\s*=")
_PLACEHOLDER = "__redlease_doc_test_url__"

RUNNER = """
import json, sys, traceback
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
for piece in json.load(sys.stdin):
    print(f"--- {piece['label']}", file=sys.stderr, flush=True)
    code = compile("\\n" * (piece["line"] - 1) + piece["source"], piece["path"], "exec")
    try:
        exec(code, namespace)
    except Exception as error:  # the traceback from the Markdown line on, without this runner
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        sys.exit(1)
"""


@dataclass
class Piece:
    """Code to run: a block or a setup comment, with where it starts in its file."""

    path: Path
    line: int
    source: str
    label: str


@dataclass
class Block:
    path: Path
    line: int
    source: str
    skip: str | None = None
    pytest: bool = False
    servers: int = 0
    needs: list[str] = field(default_factory=list)
    continues: bool = False
    setup: list[Piece] = field(default_factory=list)
    previous: Block | None = None

    @property
    def name(self) -> str:
        """``docs/fencing.md:39``: the file and the line of the block's first code line."""
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path.as_posix()}:{self.line}"


class MarkerError(ValueError):
    """A ``doc-test:`` comment the harness does not understand or cannot place."""


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def read_blocks(path: Path, text: str | None = None) -> list[Block]:
    """The Python blocks of one Markdown file, with their markers applied."""
    lines = (path.read_text() if text is None else text).splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str]] = []  # markers seen since the last code block
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = _FENCE.match(line)
        if fence:
            end = _closing_fence(lines, index, fence)
            info = fence["info"].strip().split()
            if info and info[0].lower() in LANGUAGES:
                body = _dedent(lines[index + 1 : end], fence["indent"])
                block = Block(path, index + 2, "\n".join(body) + "\n")
                _apply_markers(block, pending, blocks)
                blocks.append(block)
            elif pending:
                raise MarkerError(f"{path.name}:{pending[0][0]}: marker before a non-Python block")
            pending = []
            index = end + 1
            continue
        if "<!--" in line and "doc-test:" in line:
            end = index
            while "-->" not in lines[end]:
                end += 1
                if end == len(lines):
                    raise MarkerError(f"{path.name}:{index + 1}: unclosed doc-test comment")
            comment = "\n".join(lines[index : end + 1])
            for marker in _MARKER.finditer(comment):
                pending.append((index + 1, marker["body"]))
            index = end + 1
            continue
        if line.strip() and pending:
            raise MarkerError(f"{path.name}:{pending[0][0]}: no Python block follows this marker")
        index += 1
    if pending:
        raise MarkerError(f"{path.name}:{pending[0][0]}: no Python block follows this marker")
    return blocks


def _closing_fence(lines: list[str], start: int, opening: re.Match[str]) -> int:
    char, width = opening["fence"][0], len(opening["fence"])
    for index in range(start + 1, len(lines)):
        stripped = lines[index].strip()
        if stripped.startswith(char * width) and not stripped.strip(char):
            return index
    return len(lines)


def _dedent(lines: list[str], indent: str) -> list[str]:
    return [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines]


def _apply_markers(block: Block, markers: list[tuple[int, str]], earlier: list[Block]) -> None:
    where = block.path.name
    for line, body in markers:
        text = body.strip()
        word, _, rest = text.partition("\n") if text.startswith("setup\n") else text.partition(" ")
        if word == "setup":
            first = line + body[: body.index("setup")].count("\n") + 1
            source = "\n".join(_strip_common_indent(rest.split("\n")))
            block.setup.append(Piece(block.path, first, source + "\n", f"setup of {block.name}"))
        elif word == "skip":
            reason = rest.strip().removeprefix("(").removesuffix(")").strip()
            if not reason:
                raise MarkerError(f"{where}:{line}: a skip needs a reason: skip (why)")
            block.skip = reason
        elif word == "servers" and rest.strip().isdigit():
            block.servers = int(rest)
        elif text == "pytest":
            block.pytest = True
        elif word == "needs":
            block.needs.extend(module.strip() for module in rest.split(",") if module.strip())
        elif text == "continue":
            if not earlier:
                raise MarkerError(f"{where}:{line}: 'continue' before the file's first block")
            block.continues = True
            block.previous = earlier[-1]
        else:
            raise MarkerError(f"{where}:{line}: unknown doc-test marker {text!r}")


def _strip_common_indent(lines: list[str]) -> list[str]:
    widths = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(widths, default=0)
    return [line[cut:] for line in lines]


def pieces_of(block: Block) -> list[Piece]:
    """What runs, in order: the blocks it continues, its setup, the block itself."""
    before = pieces_of(block.previous) if block.continues and block.previous else []
    own = Piece(block.path, block.line, block.source, block.name)
    return [*before, *block.setup, own]


def redirect(source: str, url: str, masters: dict[str, str] | None = None) -> str:
    """The source with every Redis address it names turned into ``url`` (same lines).

    ``masters`` sends each URL it maps to a server of its own instead.
    """
    names = list(masters or {})

    def mark(found: re.Match[str]) -> str:
        address = found.group()
        return f"{_PLACEHOLDER}{names.index(address)}_" if address in names else _PLACEHOLDER

    redirected = _REDIS_CALL.sub(f'Redis.from_url("{_PLACEHOLDER}", ', _URL.sub(mark, source))
    elsewhere = _ELSEWHERE.search(redirected)
    if elsewhere:
        raise AssertionError(
            f"the block names a server the test cannot redirect ({elsewhere.group()!r}); "
            "write it with a redis:// URL or redis.Redis() instead"
        )
    for index, name in enumerate(names):
        redirected = redirected.replace(f"{_PLACEHOLDER}{index}_", (masters or {})[name])
    return redirected.replace(_PLACEHOLDER, url)


def urls_of(pieces: list[Piece]) -> list[str]:
    """The distinct ``redis://`` URLs the pieces name, in order of appearance."""
    return list(dict.fromkeys(found for piece in pieces for found in _URL.findall(piece.source)))


def run_pieces(
    pieces: list[Piece], url: str, cwd: Path, masters: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    payload = [
        {
            "path": str(piece.path),
            "line": piece.line,
            "source": redirect(piece.source, url, masters),
            "label": piece.label,
        }
        for piece in pieces
    ]
    return _python([sys.executable, "-c", RUNNER], url, cwd, json.dumps(payload))


def _python(
    command: list[str], url: str, cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` run to its end in ``cwd`` with ``REDIS_URL`` set to ``url``."""
    return subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "REDIS_URL": url, "PYTHONUNBUFFERED": "1"},
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )


def run_as_test_module(block: Block, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a block that is a test module under pytest (with redlease's plugin, on ``url``).

    The module's lines keep their Markdown line numbers, so pytest's report points there.
    """
    if block.continues or block.setup:
        raise MarkerError(f"{block.name}: a pytest block stands alone (no continue or setup)")
    module = cwd / f"test_{block.path.stem.replace('-', '_')}_{block.line}.py"
    module.write_text("\n" * (block.line - 1) + redirect(block.source, url))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", module.name]
    return _python(command, url, cwd)


def own_servers(
    block: Block, pieces: list[Piece], request: pytest.FixtureRequest
) -> dict[str, str] | None:
    """For a ``servers N`` block: each of its N distinct URLs on a private server of its own."""
    if not block.servers:
        return None
    names = urls_of(pieces)
    if len(names) != block.servers:
        raise MarkerError(f"{block.name}: 'servers {block.servers}' but it names {names}")
    factory = request.getfixturevalue("redlease_servers_factory")
    return {name: server.url for name, server in zip(names, factory(block.servers))}


def collect() -> list[Block]:
    blocks: list[Block] = []
    for path in doc_files():
        try:
            blocks.extend(read_blocks(path))
        except MarkerError:
            continue  # reported by test_markers_are_understood
    return blocks


BLOCKS = collect()


@pytest.fixture(scope="session")
def pages_server(request: pytest.FixtureRequest) -> str | None:
    """A private server for the pages when the session's server is a shared one."""
    if request.getfixturevalue("redlease_server").started:
        return None
    factory = request.getfixturevalue("redlease_servers_factory")
    return str(factory(1)[0].url)


@pytest.fixture
def pages_url(pages_server: str | None, request: pytest.FixtureRequest) -> str:
    """The URL a block runs against, emptied first."""
    if pages_server is None:
        return str(request.getfixturevalue("redlease_url"))
    with redis.Redis.from_url(pages_server) as client:
        client.flushall()
    return pages_server


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_block_runs(
    block: Block, pages_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if block.skip:
        pytest.skip(f"{block.name}: {block.skip}")
    for module in block.needs:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{block.name} needs {module}, which is not installed")
    if block.pytest:
        done = run_as_test_module(block, pages_url, tmp_path)
    else:
        pieces = pieces_of(block)
        done = run_pieces(pieces, pages_url, tmp_path, own_servers(block, pieces, request))
    if done.returncode != 0:
        pytest.fail(
            f"the Python block at {block.name} failed (exit {done.returncode}):\n"
            f"{done.stderr}{done.stdout}",
            pytrace=False,
        )


@pytest.mark.parametrize("path", doc_files(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_markers_are_understood(path: Path) -> None:
    read_blocks(path)


def test_the_pages_have_blocks_to_run() -> None:
    """The extraction finds the README tour and the guides' examples (it cannot go quiet)."""
    names = {block.path.name for block in BLOCKS if not block.skip}
    assert {"README.md", "fencing.md", "migrating.md", "which-lock.md"} <= names


SAMPLE = """\
# A page

<!-- doc-test: setup
stock = 3
-->
```python
left = stock - 1
```

Some words.

<!-- doc-test: continue -->

```python
assert left == 2
raise RuntimeError("the example broke")
```

<!-- doc-test: skip (needs a broker) -->
```python
import celery_broker_that_does_not_exist
```

- in a list:

  ```py
  r = redis.Redis(decode_responses=True)
  ```
"""


def test_a_failing_block_is_named_by_file_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(SAMPLE)
    first, second, skipped, listed = read_blocks(page)
    assert (first.line, second.line, skipped.line, listed.line) == (7, 15, 21, 27)
    assert skipped.skip == "needs a broker"
    labels = [piece.label for piece in pieces_of(second)]
    assert labels == [f"setup of {first.name}", first.name, second.name]
    assert pieces_of(second)[0].line == 4
    done = run_pieces(pieces_of(second), "redis://doc-test.invalid:1/0", tmp_path)
    assert done.returncode != 0
    assert f'File "{page}", line 16' in done.stderr
    assert "RuntimeError: the example broke" in done.stderr
    assert listed.source == "r = redis.Redis(decode_responses=True)\n"
    assert redirect(listed.source, "redis://x:1/0") == (
        'r = redis.Redis.from_url("redis://x:1/0", decode_responses=True)\n'
    )


def test_each_master_of_a_servers_block_gets_its_own_url() -> None:
    source = (
        'Redlock(["redis://a:6379/0", "redis://b:6379/0"]); redis.Redis(); "redis://a:6379/0"\n'
    )
    masters = {
        "redis://a:6379/0": "redis://127.0.0.1:1/0",
        "redis://b:6379/0": "redis://127.0.0.1:2/0",
    }
    assert redirect(source, "redis://127.0.0.1:3/0", masters) == (
        'Redlock(["redis://127.0.0.1:1/0", "redis://127.0.0.1:2/0"]); '
        'redis.Redis.from_url("redis://127.0.0.1:3/0", ); "redis://127.0.0.1:1/0"\n'
    )


@pytest.mark.parametrize(
    "source",
    ["redis.Redis(host='cache')", "Redis(port=7000)", "Locks('localhost')", "u = '127.0.0.1:6379'"],
)
def test_a_block_that_would_reach_another_server_fails(source: str) -> None:
    with pytest.raises(AssertionError, match="cannot redirect"):
        redirect(source, "redis://x:1/0")


@pytest.mark.parametrize(
    "text",
    [
        "<!-- doc-test: skip -->\n```python\npass\n```\n",
        "<!-- doc-test: continue -->\n```python\npass\n```\n",
        "<!-- doc-test: sometimes -->\n```python\npass\n```\n",
        "<!-- doc-test: skip (x) -->\n\nA paragraph.\n\n```python\npass\n```\n",
        "```python\npass\n```\n<!-- doc-test: skip (x) -->\n",
    ],
)
def test_a_malformed_marker_is_refused(text: str, tmp_path: Path) -> None:
    with pytest.raises(MarkerError):
        read_blocks(tmp_path / "page.md", text)

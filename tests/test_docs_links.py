"""The docs cite only what the repository has, and their stage command lines parse.

* Every file a doc (README.md, docs/*.md) cites — a markdown link to a relative path, or a backticked path that
  starts with a folder of the repository (``scripts/...``, ``docs/...``, ``bench/...``, ``src/...``, ``stages/...``,
  ``tests/...``) or of the package (``runtime/...``, ``validation/...``, ``keylists/...`` under ``src/nemotron``) —
  exists. Paths with placeholders (``<image>``, ``*``, ``{...}``, ``$VAR``) are patterns, not files.
* Every ``nemotron RECIPE STAGE ...`` / ``nemotron RECIPE pipe ...`` command line in them (code blocks and inline
  code) parses with the real CLI's options: a stage that does not exist or an option it does not take fails.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer
from typer.core import TyperGroup
import pytest

from nemotron.cli.main import build_cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: first path component -> the folder it is relative to
TOP = {p.name: ROOT for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
       and p.name not in ("output", "checkpoints", "build", "dist")}
#: package folders that docs cite without ``src/nemotron/`` (``data/`` is left out: docs also show users' ``data/...``)
PACKAGE = {name: ROOT / "src" / "nemotron" for name in ("runtime", "validation", "keylists", "templates")}
PATTERN_CHARS = set("<>*{}$|")


def _clean(path: str) -> str:
    path = path.split("::")[0].split("#")[0]
    return re.sub(r":\d+(-\d+)?$", "", path).rstrip(".,;:)")


def cited_paths(doc: Path) -> list[tuple[str, Path]]:
    """``(as written, where it must be)`` for each repository path ``doc`` cites."""
    text = doc.read_text(encoding="utf-8")
    out: list[tuple[str, Path]] = []
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):  # markdown links
        target = m.group(1)
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or an anchor in the same page
        target = _clean(target)
        if target and not PATTERN_CHARS & set(target):
            out.append((m.group(1), (doc.parent / target).resolve()))
    for m in re.finditer(r"`([^`\s]+)`", text):  # backticked paths
        token = _clean(m.group(1))
        head = token.split("/", 1)[0]
        if "/" not in token or PATTERN_CHARS & set(token) or token.startswith(("/", "~", "./", "../")):
            continue
        if head in TOP:
            out.append((m.group(1), TOP[head] / token))
        elif head in PACKAGE and head not in TOP:
            out.append((m.group(1), PACKAGE[head] / token))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_cited_file_exists(doc):
    missing = [written for written, path in cited_paths(doc) if not path.exists()]
    assert not missing, f"{doc.name} cites files that are not in the repository: {missing}"


def test_the_link_check_finds_a_missing_file(tmp_path):
    """The check itself: a link, a backticked script and a package path that do not exist are all found."""
    doc = tmp_path / "x.md"
    doc.write_text("see [the guide](nowhere.md), run `scripts/no_such.sh`, read `validation/nothing.py`; "
                   "`stages/docker/<image>.Dockerfile` is a pattern and [NVIDIA](https://nvidia.com) a URL\n")
    found = {written for written, path in cited_paths(doc) if not path.exists()}
    assert found == {"nowhere.md", "scripts/no_such.sh", "validation/nothing.py"}


# ------------------------------------------------------------------------------------ command lines
def command_lines(doc: Path) -> list[str]:
    """Every ``nemotron <recipe> ...`` command line of ``doc``: lines of code blocks (comments and an ``uv run``
    prefix dropped, ``\\`` continuations joined) and inline code."""
    text = doc.read_text(encoding="utf-8")
    lines: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        block = block.replace("\\\n", " ")
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            line = line.removeprefix("uv run ").removeprefix("$ ")
            if line.startswith("nemotron ultra3 "):
                lines.append(line)
    for m in re.finditer(r"`((?:uv run )?nemotron ultra3 [^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
        lines.append(m.group(1).removeprefix("uv run "))
    return lines


def _stage_argv(line: str) -> list[str] | None:
    """The argv of a stage or pipe command line; None for the job commands (status/logs/cancel/list), which are
    not dry-run-able, or a usage synopsis (``[OPTIONAL]``, ``A|B``, ``STAGE`` placeholders)."""
    argv = shlex.split(line)[1:]
    if len(argv) < 2 or argv[1] in ("status", "logs", "cancel", "list"):
        return None
    if any(a.startswith("[") or "|" in a or a in ("...", "…") for a in argv) or re.fullmatch(r"[A-Z][A-Z_]*", argv[1]):
        return None  # a synopsis: `nemotron ultra3 STAGE -c NAME`
    return argv


def parse(argv: list[str]) -> typer.core.TyperCommand:
    """Resolve ``argv`` through the real command groups and parse the stage command's options (nothing runs).

    Raises:
        typer.TyperException: Typer's usage error: an unknown command or option, a missing option value.
    """
    cmd = build_cli()
    ctx = cmd.make_context("nemotron", list(argv), resilient_parsing=False)
    while isinstance(cmd, TyperGroup):
        args = [*ctx._protected_args, *ctx.args]
        name, sub, rest = cmd.resolve_command(ctx, args)
        cmd = sub
        ctx = sub.make_context(name, rest, parent=ctx)
    return cmd


DOC_COMMANDS = [(doc.name, line) for doc in DOCS for line in command_lines(doc) if _stage_argv(line)]


def test_the_docs_have_stage_commands():
    assert len(DOC_COMMANDS) > 20, DOC_COMMANDS
    assert any(doc == "first_cluster.md" for doc, _ in DOC_COMMANDS)


@pytest.mark.parametrize("doc, line", DOC_COMMANDS, ids=[f"{d}:{i}" for i, (d, _) in enumerate(DOC_COMMANDS)])
def test_every_stage_command_in_the_docs_parses(doc, line):
    try:
        parse(_stage_argv(line))
    except typer.TyperException as exc:
        pytest.fail(f"{doc}: `{line}` does not parse: {exc.format_message()}")


@pytest.mark.parametrize("argv", [["ultra3", "pretrain", "-c", "tiny", "--dryrun"], ["ultra3", "pretrian"],
                                  ["ultra3", "pretrain", "--run"]])
def test_the_parse_check_refuses_what_the_cli_refuses(argv):
    with pytest.raises(typer.TyperException):
        parse(argv)


def test_the_readme_says_where_runs_are_recorded(tmp_path, monkeypatch):
    """The README never named $NEMOTRON_HOME, where every clone's runs record their artifacts (a clone's dry run
    listed another's versions as left out, unexplained). It names the variable, its default and folders as the code
    has them, and the per-clone setting, whose folder git ignores."""
    import subprocess

    from nemotron.config import artifacts

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "**`$NEMOTRON_HOME`** (default `~/.nemotron`: `artifacts/`, `runs/`, `jobs/`)" in readme
    assert "`export NEMOTRON_HOME=$PWD/.nemotron` (ignored by git)" in readme
    monkeypatch.delenv("NEMOTRON_HOME", raising=False)
    monkeypatch.setattr(artifacts, "_ROOT", None)  # no env.toml [artifacts] root of an earlier command
    monkeypatch.setenv("HOME", str(tmp_path))
    assert artifacts.store() == tmp_path / ".nemotron" / "artifacts"
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "clone" / ".nemotron"))
    assert artifacts.store() == tmp_path / "clone" / ".nemotron" / "artifacts"
    ignored = subprocess.run(["git", "check-ignore", "-q", ".nemotron/artifacts/x.json"], cwd=ROOT)
    assert ignored.returncode == 0, "git does not ignore a per-clone .nemotron"

"""Every `fleet` command line of README.md and docs/*.md is checked against the tool (issue 30).

- A usage line (`fleet quarantine list [--all] [--json]`, a README table row): the command
  exists and every option it names is one of that command's options.
- A concrete line that runs offline: it is run, in this process, on a copy of the demo's
  history, from a folder where the repository's relative paths resolve. It must not be a usage
  error or an internal error; where the doc states it, the exit code (a trailing `# exit N`),
  the JSON keys (`# keys: a, b`) and the first `error:` line shown under `$ fleet ...` in a
  text block must match.
- A concrete line that cannot run here (SSH to real hosts, the lab, root, a GPU, a path of the
  operator's machine) is listed in OFFLINE_NOT with the reason; such a line must still name
  existing options. A listed pattern that no doc line matches any more fails too.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

Fleet = Callable[..., tuple[int, str, str]]  # the fleet_run fixture (conftest.py)
ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# (regex searched in the command line, why it cannot run in the unit suite)
OFFLINE_NOT: list[tuple[str, str]] = [
    (r"^fleet lab ", "the lab: root, network namespaces and real sshd hosts"),
    (r"^fleet probe\b", "probes hosts over SSH"),
    (r"^fleet apply ", "changes real hosts over SSH"),
    (r"^fleet rollback ", "changes real hosts over SSH"),
    (r"^fleet rollout start -i ", "a rollout on real hosts over SSH"),
    (r"^fleet hosts trust ", "fetches host keys over SSH"),
    (r"^fleet bundle collect ", "collects a bundle over SSH"),
    (r"^fleet diagnose \S+ -i ", "diagnoses a live host over SSH"),
    (r"^fleet diagnose /tmp/", "reads a bundle collected from a live host first"),
    (r"matrices/(old|prod)\.yaml", "stands for the operator's own matrix"),
    (r"^fleet history prune -m ", "names the operator's matrix (matrices/prod.yaml)"),
]


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    argv: tuple[str, ...]  # after `fleet`
    comment: str
    shown_error: str | None  # the `error:` line a text block shows under it
    mention: bool = False  # a README table cell: names the command, its options checked only

    @property
    def text(self) -> str:
        return "fleet " + shlex.join(self.argv)


_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:[=,|:].*)?$|\.\.\.|^\[|\]$|^\(|\)$|\|")


def _split(line: str) -> tuple[str, str]:
    """(command, trailing comment) of a shell line; the comment starts at ` #`."""
    m = re.search(r"\s#\s?", line)
    return (line[: m.start()], line[m.end():]) if m else (line, "")


def _argv(command: str) -> tuple[str, ...] | None:
    """The arguments after `fleet` (a pipe or a redirect and what follows dropped)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, w in enumerate(words):
        if w in ("|", ">", ">>", "2>&1", "&&", ";"):
            words = words[:i]
            break
    if words and words[0] in (".venv/bin/fleet", "fleet"):
        return tuple(words[1:])
    return None


def doc_commands() -> list[DocCommand]:
    out: list[DocCommand] = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        fence: str | None = None
        i = 0
        while i < len(lines):
            raw = lines[i]
            where = f"{path.relative_to(ROOT)}:{i + 1}"
            if raw.startswith("```"):
                fence = None if fence is not None else raw[3:].strip()
                i += 1
                continue
            if fence is None:
                for cell in re.findall(r"`((?:\.venv/bin/)?fleet [^`]+)`", raw) \
                        if raw.startswith("|") else []:
                    argv = _argv(cell)
                    if argv:
                        out.append(DocCommand(where, argv, "", None, mention=True))
                i += 1
                continue
            line = raw.strip()
            prompt = line.startswith("$ ")
            if fence == "text" and not prompt:
                i += 1
                continue  # output shown, not a command
            line = line[2:] if prompt else line
            if not re.match(r"(\.venv/bin/)?fleet\s", line):
                i += 1
                continue
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i].strip()
            command, comment = _split(line)
            shown = None
            if fence == "text":
                after = next((x for x in lines[i + 1:] if x.strip()), "")
                shown = after if after.startswith("error:") else None
            argv = _argv(command)
            if argv:
                out.append(DocCommand(where, argv, comment, shown))
            i += 1
    return out


COMMANDS = doc_commands()


def _is_usage_line(c: DocCommand) -> bool:
    return c.mention or any(_PLACEHOLDER.search(w) for w in c.argv)


def _offline_not(c: DocCommand) -> str | None:
    return next((why for rx, why in OFFLINE_NOT if re.search(rx, c.text)), None)


@cache
def _tree() -> Any:
    import typer

    from fleet.cli.app import build_app

    return typer.main.get_command(build_app())


def _resolve(argv: tuple[str, ...]) -> tuple[Any, list[str]]:
    """(the click command, the option names it and the root group take) for `argv`; a word
    `parse|import` names each of those subcommands (all must exist; the first is followed)."""
    node = _tree()
    names = [o for p in node.params for o in p.opts + p.secondary_opts]
    skip_value = False
    for w in argv:
        if skip_value:
            skip_value = False
            continue
        if w.startswith("-"):
            skip_value = w == "--db"
            continue
        subs = getattr(node, "commands", {})
        alternatives = re.split(r"[|/]", w)
        if not all(a in subs for a in alternatives):
            break
        for a in alternatives:
            names += [o for p in subs[a].params for o in p.opts + p.secondary_opts]
        node = subs[alternatives[0]]
        names += [o for p in node.params for o in p.opts + p.secondary_opts]
    return node, names


def _options_named(argv: tuple[str, ...]) -> list[str]:
    found = []
    for w in argv:
        for part in re.split(r"[\[\]()|]", w):
            m = re.match(r"^(--?[A-Za-z][\w-]*)", part)
            if m and part != "-":
                found.append(m.group(1))
    return found


def test_the_docs_have_commands() -> None:
    assert len(COMMANDS) > 60
    assert sum(not _is_usage_line(c) and _offline_not(c) is None for c in COMMANDS) >= 15


@pytest.mark.parametrize("c", COMMANDS, ids=lambda c: c.where)
def test_documented_options_exist(c: DocCommand) -> None:
    if "--help" in c.argv:
        return
    node, names = _resolve(c.argv)
    assert not hasattr(node, "commands") or node.invoke_without_command, \
        f"{c.where}: {c.text}: names a group, not a command"
    unknown = [o for o in _options_named(c.argv) if o not in names]
    assert not unknown, f"{c.where}: {c.text}: no such option {unknown}"


def test_every_offline_exception_is_used() -> None:
    unused = [rx for rx, _ in OFFLINE_NOT
              if not any(re.search(rx, c.text) for c in COMMANDS if not _is_usage_line(c))]
    assert not unused, f"OFFLINE_NOT patterns no doc line needs: {unused}"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the docs' relative paths (matrices/, tests/data/, inventories/) resolve
    and whatever a command writes stays out of the repository."""
    d = tmp_path_factory.mktemp("docs")
    for name in ("matrices", "inventories", "tests", "contrib", "docs", "README.md"):
        (d / name).symlink_to(ROOT / name)
    return d


RUNNABLE = [c for c in COMMANDS if not _is_usage_line(c) and _offline_not(c) is None]


@pytest.mark.parametrize("c", RUNNABLE, ids=lambda c: c.where)
def test_documented_command_runs_as_documented(c: DocCommand, fleet_run: Fleet,
                                               scratch: Path, demo_db: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "fleet.db"
    shutil.copy(demo_db, db)
    monkeypatch.chdir(scratch)
    monkeypatch.setenv("FLEET_DB", str(db))
    code, out, err = fleet_run(*c.argv)
    said = f"{c.where}: {c.text} -> exit {code}\n{out[-2000:]}\n{err[-2000:]}"
    assert "internal error" not in err and "No such option" not in err, said
    stated = re.search(r"\bexit (\d)\b", c.comment)
    if stated:
        assert code == int(stated.group(1)), said
    elif c.shown_error is not None:
        assert code != 0, said
    else:
        assert code != 2, said
    if c.shown_error is not None:
        head = re.split(r" \(|\.\.\.", c.shown_error, maxsplit=1)[0]
        assert head in err, f"{said}\nthe doc shows: {c.shown_error}"
    keys = re.search(r"\bkeys: ([\w, ]+)", c.comment)
    if keys:
        doc = json.loads(out)
        missing = {k.strip() for k in keys.group(1).split(",")} - set(doc)
        assert not missing, f"{said}\nkeys the doc names but the output lacks: {missing}"

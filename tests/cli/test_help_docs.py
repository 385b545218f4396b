"""The --help texts and the docs name the same recipes and options (issue 26, finding 10).

Every `aocsim COMMAND ... --option` written in README.md or docs/*.md must be an option that
`aocsim COMMAND --help` lists; every training recipe must be in `aocsim train --help` and every
recipe the docs name must exist; every placement option must be in `aocsim sweep --help`, and every
`placement.NAME` the docs name must be one. The README states how long the test suite takes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from aocsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The commands whose options the docs use, longest first (a subcommand before its group).
COMMANDS = ("sweep status", "sweep show", "sweep run", "sweep", "devices show", "devices list", "bench loop",
            "bench sweep", "bench compare", "bench search", "compare", "plot", "train", "evaluate", "models table")
SPAN = re.compile(r"`([^`]+)`")  # inline code, which may wrap onto the next line
COMMAND = re.compile(r"(?:^|\s)aocsim(?:\s+(?:--threads\s+\S+|-v+))*\s+([a-z].*)$", re.S)


def _help(command: str) -> str:
    out = CliRunner().invoke(main, [*command.split(), "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    return out.output


def _mentions() -> list[tuple[str, str, str]]:
    """(file, command, option) for every option written after `aocsim COMMAND` in a code span or block."""
    found = []
    for doc in DOCS:
        parts = doc.read_text().split("```")  # fenced code blocks: the odd parts
        code = [line for part in parts[1::2] for line in part.splitlines()]
        lines = [line for part in parts[0::2] for line in part.splitlines()]
        code += [line for line in lines if line.startswith("    ")]  # indented code blocks
        prose = "\n".join(line for line in lines if not line.startswith("    "))
        spans = [c.group(1) for m in SPAN.finditer(prose) if (c := COMMAND.search(m.group(1)))]
        spans += [c.group(1) for line in code for part in line.split("&&") if (c := COMMAND.search(part.strip()))]
        for span in spans:
            span = " ".join(span.split()).split("#")[0].split(" && ")[0]
            command = next((c for c in COMMANDS if span == c or span.startswith(c + " ")), None)
            if command is None:
                continue
            for option in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", span):
                found.append((doc.name, command, option))
    return found


def test_every_option_the_docs_write_is_in_the_commands_help() -> None:
    mentions = _mentions()
    assert len(mentions) > 40  # the docs do use options: the scan finds them
    helps: dict[str, str] = {}
    missing = []
    for doc, command, option in mentions:
        text = helps.setdefault(command, _help(command))
        if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text):
            missing.append(f"{doc}: aocsim {command} {option}")
    assert not sorted(set(missing)), sorted(set(missing))


def test_train_help_lists_every_recipe_and_the_docs_name_only_recipes() -> None:
    from aocsim.train.recipes import RECIPES

    text = " ".join(_help("train").split())
    assert [r for r in RECIPES if r not in text] == []
    named = {m for doc in DOCS for m in re.findall(r"aocsim train ([a-z0-9][\w-]*)", doc.read_text())}
    assert named and named <= set(RECIPES) | {"RECIPE"}, named - set(RECIPES)


def test_sweep_help_lists_every_placement_option_and_the_docs_name_only_options() -> None:
    from aocsim.execute.placement import DECLARATIONS

    text = _help("sweep")
    assert [n for n in DECLARATIONS if n not in text] == []
    named = {m for doc in DOCS for m in re.findall(r"(?<![\w/])placement\.(?!py\b)([a-z_]+)", doc.read_text())}
    assert named - set(DECLARATIONS) == set()
    from aocsim.execute.placement import GROUPS

    sweeps = (ROOT / "docs" / "SWEEPS.md").read_text()  # its table names each group; the help lists every option
    assert [g for g in GROUPS if f"\n| {g} |" not in sweeps] == []


def test_the_readme_states_the_number_of_tests_the_suite_collects(request: pytest.FixtureRequest) -> None:
    """The README's test count is what the whole suite collects now (a run of a subset skips the check: its
    count is not the suite's), and it says how long the suite took and where."""
    config = request.config
    whole = all(Path(a).resolve() == ROOT / "tests" for a in config.args) and not config.option.keyword \
        and not config.option.markexpr and not config.getoption("deselect", None)
    if not whole:
        pytest.skip("a subset of the suite runs: its count is not the README's")
    text = " ".join((ROOT / "README.md").read_text().split())
    stated = re.search(r"it collects ([\d,]+) tests", text)
    assert stated, "the README should say how many tests the suite collects"
    assert int(stated.group(1).replace(",", "")) == request.session.testscollected
    assert re.search(r"\d+ min \d+ s on 2 idle cores", text), "the README should say how long the suite took"


def test_what_the_main_job_writes_is_ignored_by_git() -> None:
    """The README's main job (`aocsim compare` in the checkout) leaves no untracked file: its default outputs
    are ignored (the notebooks write theirs to temporary folders: tests/project/test_notebooks.py)."""
    import subprocess

    from aocsim.cli.compare import compare_cmd

    out = next(p for p in compare_cmd.params if p.name == "out").default
    for name in (Path(out).name, Path(out).with_suffix(".png").name):
        check = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
        assert check.returncode == 0, f"{name} (written by aocsim compare) is not ignored by .gitignore"


def test_modules_has_one_description() -> None:
    """`modules` (issue 41, finding 6): its declaration's help line is the definition; `aocsim compare --help`,
    docs/SWEEPS.md, docs/PHYSICS.md and the sweep metric use its words."""
    from aocsim.execute.placement import DECLARATIONS, MODULES
    from aocsim.experiments.metrics import METRICS

    words = DECLARATIONS["modules"].help
    assert MODULES in words
    assert words in " ".join(_help("compare").split())
    assert MODULES in " ".join((ROOT / "docs" / "SWEEPS.md").read_text().split())
    assert MODULES in " ".join((ROOT / "docs/PHYSICS.md").read_text().split())
    assert METRICS["modules"].definition.startswith(MODULES)

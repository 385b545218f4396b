"""Every "PHYSICS.md section N step M" cited in the code and docs resolves inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHYSICS = ROOT / "docs" / "PHYSICS.md"
CITATION = re.compile(r"([\w./-]*)PHYSICS\.md(?:,? section (\d+))?(?:,? steps? (\d+)(?:-(\d+))?)?")


def _sections_and_steps() -> tuple[set[int], dict[int, set[int]]]:
    text = PHYSICS.read_text()
    sections = {int(m) for m in re.findall(r"^## (\d+)\. ", text, flags=re.M)}
    steps: dict[int, set[int]] = {}
    current = 0
    for line in text.splitlines():
        head = re.match(r"^## (\d+)\. ", line)
        if head:
            current = int(head.group(1))
        step = re.match(r"^(\d+)\. \*\*", line)
        if step:
            steps.setdefault(current, set()).add(int(step.group(1)))
    return sections, steps


def _citing_files() -> list[Path]:
    files = [*ROOT.glob("aocsim/**/*.py"), *ROOT.glob("docs/*.md"), *ROOT.glob("tests/**/*.py"),
             ROOT / "README.md", ROOT / "devices" / "SCHEMA.md"]
    return [f for f in files if f != PHYSICS and f.name != "test_docs.py"]


def test_physics_citations_resolve() -> None:
    sections, steps = _sections_and_steps()
    assert sections == {1, 2, 3, 4, 5, 6} and steps[2] == set(range(1, 14))
    cited = 0
    for path in _citing_files():
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            for m in CITATION.finditer(line):
                where = f"{path.relative_to(ROOT)}:{line_no}: {m.group(0)!r}"
                if line[:m.start()].endswith("]("):  # a Markdown link, relative to its file
                    assert (path.parent / f"{m.group(1)}PHYSICS.md").resolve() == PHYSICS, f"{where}: broken link"
                else:
                    assert m.group(1).endswith("docs/"), f"{where} should cite docs/PHYSICS.md"
                if m.group(2) is None:  # the file as a whole
                    assert m.group(3) is None, f"{where} names a step but no section"
                    continue
                section = int(m.group(2))
                assert section in sections, f"{where}: no section {section}"
                for step in (m.group(3), m.group(4)):
                    assert step is None or int(step) in steps.get(section, set()), f"{where}: no step {step}"
                cited += 1
    assert cited >= 15  # the schema, the hardware modules and the tests cite it


def test_schema_doc_is_generated_from_the_schema() -> None:
    from aocsim.hardware.profiles.schema import markdown

    assert (ROOT / "devices" / "SCHEMA.md").read_text() == markdown()


def test_result_files_the_docs_name_are_in_the_repository() -> None:
    """Every docs/... data file or figure (.nc, .png) named in the docs or README is tracked by git, not
    only present in a working copy (a *.nc ignore rule once kept the sweep results out)."""
    import subprocess

    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    named = set()
    for doc in [*ROOT.glob("docs/*.md"), ROOT / "README.md"]:
        text = doc.read_text()
        named.update(re.findall(r"docs/[\w/.-]+\.(?:nc|png)\b", text))
        base = doc.parent.relative_to(ROOT).as_posix()  # markdown links are relative to their file
        named.update(f"{base}/{p}".lstrip("./") for p in re.findall(r"\]\(([\w/.-]+\.(?:nc|png))\)", text))
    missing = sorted(p for p in named if p not in tracked)
    assert not missing, f"named in the docs but not tracked: {missing}"

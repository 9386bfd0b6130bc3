"""The README as a user meets it: its first two commands are the ones CI and users run, its 10-line example
prints what the README shows, and every page it or docs/ links to exists."""

from __future__ import annotations

import re
import subprocess
import sys

from .conftest import ROOT

README = (ROOT / "README.md").read_text()
MAIN_JOB = ("bash scripts/setup.sh && .venv/bin/paratune tune --workload "
            "examples/workloads/mixtral-8x22b-mi355x-recipe.yaml --target-cluster examples/clusters/mi355x-4n.yaml "
            "--out-dir out/mixtral --sweep")
TESTS = "bash scripts/setup.sh && .venv/bin/ruff check . && .venv/bin/mypy && .venv/bin/python -m pytest"


def blocks(text: str, language: str) -> list[str]:
    return [b.strip("\n") for b in re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)]


def test_the_first_two_commands_are_the_main_job_and_the_tests():
    assert blocks(README, "bash")[:2] == [MAIN_JOB, TESTS]
    assert README.index(MAIN_JOB) < README.index("## ")  # before any section: where a user starts


def test_the_ten_line_example_prints_what_the_readme_shows(tmp_path):
    """Compared with every number masked: the verdicts (fits, how much a layout needs, the broken rule) must
    match; the figures are the oracle's of the day and its calibration may move them."""
    [example] = blocks(README, "python")[:1]
    after = README[README.index(example) + len(example):]
    following = re.match(r"\n```\n+```\n(.*?)```", after, flags=re.S)  # the plain block right after it
    assert following is not None, "the example's output block must follow it"
    shown = following.group(1)
    assert len(example.splitlines()) == 10
    (tmp_path / "example.py").write_text(example)
    out = subprocess.run([sys.executable, str(tmp_path / "example.py")], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr

    def masked(text: str) -> list[str]:
        return [re.sub(r"\d[\d,.]*", "#", line).rstrip() for line in text.strip().splitlines()]

    assert masked(out.stdout) == masked(shown)
    assert len(masked(shown)) == 4 and "illegal" in shown and "fits" in shown


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) >= 8
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name} links to {target}, which is missing"
    linked = set(re.findall(r"\]\(docs/([^)#]+\.md)", README))
    assert linked == {p.name for p in (ROOT / "docs").glob("*.md")}  # every reference page is reachable

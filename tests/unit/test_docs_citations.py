"""Everything the code, docs and --help cite resolves inside the repository: each
invariant "I-n" is defined in docs/design.md, each test a doc names exists, each
relative link and anchor of the docs leads somewhere."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
TEXT = {".py", ".md", ".yaml", ".yml", ".tpl", ".txt", ".java", ".go", ".ts", ".js", ".mjs", ".sh", ".toml"}
SKIP = {".git", "node_modules", "vectors", "__pycache__", "target", "dist"}


def _files(suffixes=TEXT, under=ROOT):
    for path in under.rglob("*"):
        if path.is_file() and path.suffix in suffixes and not SKIP & set(path.relative_to(ROOT).parts):
            yield path


def _docs():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("sdk/*/README.md"))]


def test_every_cited_invariant_is_defined_in_docs_design():
    defined = set(re.findall(r"\*\*(I-\d+) —", DESIGN.read_text()))
    assert defined == {f"I-{n}" for n in range(1, 10)}
    cited = {}
    for path in _files():
        for n in re.findall(r"\bI-(\d+)\b", path.read_text(errors="replace")):
            cited.setdefault(f"I-{n}", path.relative_to(ROOT))
    undefined = {i: str(p) for i, p in cited.items() if i not in defined}
    assert not undefined, f"cited but not defined in docs/design.md: {undefined}"


def test_nothing_cites_a_design_file_outside_the_repository():
    offenders = [
        str(p.relative_to(ROOT))
        for p in _files()
        if "DESIGN.md" in p.read_text(errors="replace") and p != Path(__file__)
    ]
    assert not offenders


def test_tests_named_by_the_docs_exist():
    defined = set()
    for path in _files({".py"}, ROOT / "tests"):
        defined |= set(re.findall(r"def (test_\w+)", path.read_text()))
    named = {name for doc in _docs() for name in re.findall(r"`(test_\w+)`", doc.read_text())}
    assert named - defined == set()


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading slugs: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", doc.read_text(), re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(doc):
    broken = []
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # absolute URL
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"

"""Every relative link in the project's Markdown reaches a file that exists and, with a
`#fragment`, a heading there: sections get moved between docs (has.md's history went to
has-experiments.md and has-performance.md), and a link that silently points nowhere is how a
reader loses the evidence behind a figure."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FENCE = re.compile(r"```.*?```", re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped but `-` and `_`, spaces
    as `-` (a repeated heading gets `-1`, `-2`, ... in `anchors`)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).split("\n"):
        match = HEADING.match(line)
        if match:
            base = slug(match[2])
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(files: list[Path], root: Path) -> list[str]:
    found, cache = [], {}
    for doc in files:
        for match in LINK.finditer(FENCE.sub("", doc.read_text())):
            target = match[1]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            resolved = (doc.parent / path).resolve() if path else doc
            if not resolved.exists():
                found.append(f"{doc.relative_to(root)}: no file {target}")
            elif fragment and resolved.suffix == ".md":
                if resolved not in cache:
                    cache[resolved] = anchors(resolved)
                if fragment not in cache[resolved]:
                    found.append(f"{doc.relative_to(root)}: no heading {target}")
    return found


def project_docs() -> list[Path]:
    return sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("deploy/*/README.md")])


def test_every_relative_link_in_the_docs_reaches_its_file_and_heading() -> None:
    docs = project_docs()
    assert len(docs) > 10
    assert broken_links(docs, ROOT) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top: the start\n\n## Twice\n\n## Twice\n")
    doc = tmp_path / "b.md"
    doc.write_text("[ok](a.md#top-the-start) [ok](a.md#twice-1) [web](https://x.org/#y)\n"
                   "[gone](c.md) [no heading](a.md#bottom) [self](#nowhere)\n"
                   "```\n[in code](ignored.md)\n```\n")
    assert broken_links([doc], tmp_path) == [
        "b.md: no file c.md", "b.md: no heading a.md#bottom", "b.md: no heading #nowhere"]

"""What a build of the package and of the image gets: the licence the metadata names, and a build context that holds
what `pip install /src` needs and none of the virtualenv, the git history or the caches."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_license_file_is_the_one_the_metadata_names() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    text = (REPO / "LICENSE").read_text()
    assert meta["license"] == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def _ignored(name: str, patterns: list[str]) -> bool:
    """Docker's rule for a top-level name: the last matching pattern wins; ``!`` re-includes."""
    out = False
    for p in patterns:
        neg = p.startswith("!")
        p = p.removeprefix("!").removeprefix("/").rstrip("/")
        if fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p.removeprefix("**/")):
            out = not neg
    return out


def test_the_image_build_context_leaves_out_the_virtualenv_and_keeps_the_sources() -> None:
    patterns = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    for heavy in (".venv", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist"):
        assert _ignored(heavy, patterns), heavy
    # what `pip install /src` in deploy/Containerfile reads (profiles/: the shipped profiles' files)
    for needed in ("pyproject.toml", "README.md", "LICENSE", "nodeagent", "profiles", "deploy", "man"):
        assert not _ignored(needed, patterns), needed
    assert (REPO / "nodeagent/profile/shipped").resolve() == (REPO / "profiles").resolve()


def test_the_readme_is_a_front_page_whose_links_lead_somewhere() -> None:
    """README: what it is, install, quick start, first apply, where to go next (the reference lives in docs/); every
    relative link of README and docs/ names a file that exists."""
    import re

    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "make demo" in readme and "make test" in readme and ".venv/bin" in readme
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench/README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target:
                continue
            assert (doc.parent / target).exists(), f"{doc.relative_to(REPO)}: link to {target} leads nowhere"

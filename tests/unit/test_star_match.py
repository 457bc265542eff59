"""damon_caps' star-only matcher answers exactly as fnmatch.fnmatchcase for the patterns it is given."""

from __future__ import annotations

import fnmatch
import itertools

from nodeagent.facts.damon_caps import FEATURES, fnmatchcase


def test_star_matcher_is_fnmatch_for_star_patterns() -> None:
    patterns = {p for f in FEATURES for p in (f.marker, f.parent) if p is not None}
    patterns |= {"".join(t) for n in range(5) for t in itertools.product("a*/", repeat=n)}
    names = {"".join(t) for n in range(6) for t in itertools.product("a*/b", repeat=n)}
    names |= {"contexts/*/schemes/*/filters/nr_filters", "contexts/*/schemes/*/core_filters/*/allow", "refresh_ms"}
    for p in patterns:
        assert "?" not in p and "[" not in p
        for n in names:
            assert fnmatchcase(n, p) == fnmatch.fnmatchcase(n, p), (n, p)

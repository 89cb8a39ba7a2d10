"""Property tests of the parser: renaming indices keeps the cache key.

(Results against the oracle are the differential fuzzer's job: tests/fuzz/test_fuzz.py.)
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from einc.planner.equation import parse

LETTERS = "abcdefgh"


@st.composite
def problems(draw):
    n = draw(st.integers(1, 6))
    sizes = {ch: draw(st.sampled_from([0, 1, 2, 3, 4])) if draw(st.integers(0, 9)) == 0
             else draw(st.sampled_from([1, 2, 3, 4])) for ch in LETTERS}
    ell_sizes = [draw(st.sampled_from([1, 2, 3])) for _ in range(2)]
    terms, shapes = [], []
    any_ellipsis = False
    for _ in range(n):
        labels = draw(st.lists(st.sampled_from(LETTERS[: 2 + n]), min_size=0, max_size=4))
        shape = []
        ones = {ch for ch in set(labels) if draw(st.integers(0, 5)) == 0}   # broadcast this one
        for ch in labels:
            shape.append(1 if ch in ones else sizes[ch])
        term = "".join(labels)
        if draw(st.integers(0, 3)) == 0:
            k = draw(st.integers(0, 2))
            pos = draw(st.integers(0, len(labels)))
            ell = [draw(st.sampled_from([1, s])) for s in ell_sizes[2 - k:]]
            term = term[:pos] + "..." + term[pos:]
            shape = shape[:pos] + ell + shape[pos:]
            any_ellipsis = True
        terms.append(term)
        shapes.append(tuple(shape))
    seen = sorted({ch for t in terms for ch in t if ch != "."})
    if draw(st.booleans()):
        out = draw(st.permutations(seen))[: draw(st.integers(0, len(seen)))]
        out = "".join(out)
        if any_ellipsis and draw(st.booleans()):
            out = "..." + out
        equation = ",".join(terms) + "->" + out
    else:
        equation = ",".join(terms)
    return equation, shapes


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(problem=problems(), perm=st.permutations("abcdefgh"))
def test_renaming_keeps_the_key(problem, perm):
    """Renaming indices consistently gives the same canonical equation (one cache entry).
    An implicit output (no ``->``) is written out first, by torch's rule (the indices that
    appear once, in alphabetical order, after the ellipsis' dimensions), since renaming
    reorders it; the implicit form must parse as that explicit one."""
    equation, _ = problem
    if "->" not in equation:
        letters = equation.replace("...", "").replace(",", "")
        once = "".join(sorted(ch for ch in set(letters) if letters.count(ch) == 1))
        explicit = equation + "->" + ("..." if "..." in equation else "") + once
        assert parse(equation).canonical == parse(explicit).canonical
        equation = explicit
    table = str.maketrans("abcdefgh", "".join(perm))
    renamed = equation.translate(table)
    assert parse(renamed).canonical == parse(equation).canonical

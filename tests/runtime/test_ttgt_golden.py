"""The copy-cost model decides as recorded (runtime/torch_executor/ttgt.py): ``choose`` (and
``for_training``, and ``candidates``'s list where a digest of it is kept) against the golden
file tests/runtime/ttgt_golden.py writes, thousands of step signatures from the fuzzer,
the benchmark suite, einsum_benchmark networks and random steps.  A change of the model
that is meant rewrites the file (``python -m tests.runtime.ttgt_golden``); a faster
search must leave it as it is."""

import gzip
import json

import pytest

from einc.runtime.torch_executor import ttgt
from tests.runtime.ttgt_golden import GOLDEN, candidates_digest, decide, layout_row


def _cases():
    with gzip.open(GOLDEN, "rt") as f:
        return json.load(f)


def _same(got, want):
    """Every field equal, the cost to a millionth."""
    return got[:7] == want[:7] and got[8:] == want[8:] and abs(got[7] - want[7]) <= 1e-6 * max(abs(want[7]), 1e-9)


def test_the_golden_file_covers_the_model():
    cases = _cases()
    assert len(cases) > 3000
    rows = [c["lay"] for c in cases]
    assert {r[5] for r in rows} >= {"", "l", "r", "lr", "c", "lrc"}
    assert any(r[8] for r in rows) and any(r[9] for r in rows) and any(r[6] for r in rows)
    assert any("train" in c for c in cases) and any(c["small"] == 0 for c in cases)
    assert any(c["f"][2] for c in cases) and any(not c["f"][0] for c in cases)
    assert any(0 in dict(c["s"]).values() for c in cases) and any(1 in dict(c["s"]).values() for c in cases)


def test_choose_decides_as_recorded():
    assert ttgt.pick is ttgt._PICK       # the fast search, not the list of every candidate
    wrong = []
    for n, case in enumerate(_cases()):
        lay, training = decide(case)
        if not _same(layout_row(lay), case["lay"]):
            wrong.append((n, case, layout_row(lay)))
        elif ("train" in case) != (training is not None) or training and not _same(layout_row(training),
                                                                                     case["train"]):
            wrong.append((n, case, training and layout_row(training)))
    assert not wrong, f"{len(wrong)} decisions changed, the first: {wrong[0]}"


def test_candidates_are_listed_as_recorded():
    wrong = [n for n, case in enumerate(_cases()) if "cand" in case and candidates_digest(case) != case["cand"]]
    assert not wrong, f"{len(wrong)} candidate lists changed, the first: case {wrong[0]}"


@pytest.mark.parametrize("field", [0, 1, 5, 7])
def test_a_changed_decision_fails(field):
    """The check above sees a change of any field (here a few of them)."""
    case = next(c for c in _cases() if len(c["lay"][1]) > 1 and c["lay"][5])
    row = layout_row(decide(case)[0])
    assert _same(row, case["lay"])
    changed = list(row)
    changed[field] = {0: not row[0], 1: row[1][::-1], 5: row[5] + "x", 7: row[7] * (1 + 1e-5)}[field]
    assert not _same(changed, case["lay"])


def test_the_search_takes_the_layout_pick_takes_among_every_candidate(monkeypatch):
    """``choose``'s bounded search against :data:`pick` over the whole list (taken where
    ``pick`` is replaced): the same Layout, cost bit for bit, on an eighth of the cases."""
    cases = _cases()[::8]
    fast = [decide(case) for case in cases]
    real = ttgt.pick
    monkeypatch.setattr(ttgt, "pick", lambda found: real(found))
    slow = [decide(case) for case in cases]
    assert fast == slow

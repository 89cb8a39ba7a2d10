"""bench/paths.py's timing of einc's planning: what the runs before it left is not einc's."""

import gc

from bench import paths


def test_einc_is_timed_after_the_garbage_the_runs_before_left_is_collected(monkeypatch):
    # a full collection over the process's objects, set off by einc's allocations, would be
    # timed as einc's planning: the garbage is collected before the clock starts
    import einc.planner

    paths.forget()      # before the patch: the modules it imports bind plan_for as they load

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append("collect") or 0)

    class Plan:
        path, notes = ((0, 1),), ("Path search: stub",)

    monkeypatch.setattr(einc.planner, "plan_for", lambda eq, shapes: calls.append("plan") or Plan())
    seconds, cpu, path, note = paths.plan_einc("ij,jk->ik", [(2, 3), (3, 4)])
    assert calls[-2:] == ["collect", "plan"] and path == ((0, 1),) and note == "Path search: stub"


def test_every_first_call_is_timed_after_the_garbage_the_runs_before_left_is_collected(monkeypatch, tmp_path):
    # the peers' searches leave much garbage: a full collection it sets off inside one tool's
    # timed call would be charged to that tool alone
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))    # restored after: end_to_end sets its own
    calls = []
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append("collect") or 0)
    out = paths.end_to_end("ab,bc->ac", [(2, 3), (3, 4)], lambda: str(tmp_path / str(len(calls))), rounds=2)
    assert len(calls) == 2 * 4 and out["diff"] < 1e-12


def test_first_calls_are_timed_only_where_the_peers_quick_paths_fit_too():
    # the peers' first calls contract by their own quick paths, which on a QAOA amplitude
    # may need 2^28 elements and minutes where the best path takes a second
    fits = ((1e9, 2 ** 20), (5e10, 2 ** 24))
    assert paths.executes(1e9, 2 ** 22, fits, 2e9)
    assert not paths.executes(1e9, 2 ** 22, ((1e9, 2 ** 20), (1e10, 2 ** 28)), 2e9)
    assert not paths.executes(1e9, 2 ** 22, ((1e9, 2 ** 20), (1e12, 2 ** 24)), 2e9)
    assert not paths.executes(3e9, 2 ** 22, fits, 2e9) and not paths.executes(1e9, 2 ** 26, fits, 2e9)
    assert not paths.executes(1e9, 2 ** 22, (), 2e9)

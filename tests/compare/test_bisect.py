"""Bisection: a real git history with a slowdown at commit 7, and the decision rules."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from stackcost.cli import main
from stackcost.compare.bisect import (
    BisectError,
    Judging,
    Measure,
    MeasurePair,
    bisect,
    git_points,
    parse_value,
)

BENCH = """\
import time
t = time.perf_counter()
time.sleep({delay})
print("value=%.6f" % (time.perf_counter() - t))
"""


def git(repo, *args):
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """12 commits; the 7th makes bench.py 5x slower; the 4th breaks it (skipped)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")
    shas = []
    for i in range(1, 13):
        delay = 0.06 if i >= 7 else 0.01
        body = "raise SystemExit(3)\n" if i == 4 else BENCH.format(delay=delay)
        (repo / "bench.py").write_text(f"# revision {i}\n" + body)
        git(repo, "add", "bench.py")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas


def test_git_bisect_finds_commit_7(repo, capsys):
    path, shas = repo
    assert git_points(path, shas[0], shas[-1]) == shas
    cmd = f"{sys.executable} bench.py"
    code = main(
        ["bisect", "--git", str(path), "--good", shas[0], "--bad", shas[-1], "--command", cmd]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"first bad: {shas[6]}" in out
    assert git(path, "worktree", "list").count("\n") == 0  # temporary worktrees removed


def test_failing_points_are_skipped_and_good_is_measured_beside_every_pair():
    calls: dict[str, int] = {}

    def measure(p: str) -> float | None:
        calls[p] = calls.get(p, 0) + 1
        return None if p == "b" else {"a": 1.0, "c": 10.0, "d": 10.0, "e": 10.0}[p]

    res = bisect(["a", "b", "c", "d", "e"], measure)
    assert res.first_bad is None and res.candidates == ["b", "c"]  # b failed: ambiguous
    assert any(p.verdict == "skipped" for p in res.probes)
    # The good endpoint is measured beside every pair: never judged against an old number.
    assert calls["a"] == sum(len(p.values) for p in res.probes) + 1  # + b's failed pair


def test_a_value_that_is_not_finite_fails_its_point_and_says_so():
    # value=1e999 parses as inf. Counted, it would pull a mean past any middle and name a
    # "first bad (unsure)"; as no measurement, its point fails, as one that cannot build.
    values = {"a": 1.0, "b": math.inf, "c": math.inf, "d": 10.0}
    res = bisect(["a", "b", "c", "d"], values.__getitem__)
    assert res.first_bad is None and res.candidates == ["b", "c", "d"]
    failed = [p for p in res.probes if p.point in ("b", "c")]
    assert failed and all(p.verdict == "skipped" and "not a finite" in p.note for p in failed)
    assert parse_value("value=1e999") == math.inf  # what a command may print
    with pytest.raises(BisectError, match="not a finite"):
        bisect(["a", "b"], {"a": 1.0, "b": math.nan}.__getitem__)


def test_cell_mode_fails_a_point_whose_blocks_are_not_finite():
    def pairs(good: str, point: str) -> list[tuple[float, float]]:
        return [(math.inf if point == "b" else {"c": 2.0}[point], 1.0)] * 3

    res = bisect(["a", "b", "c"], measure_pair=pairs)
    (b,) = [p for p in res.probes if p.point == "b"]
    assert b.verdict == "skipped" and "not a finite" in b.note and res.first_bad is None


def test_a_point_near_the_middle_gets_pairs_until_its_interval_clears_it():
    # Good 1, bad 10: the middle is sqrt(10) (in logs). Point c reads 5 then 9 then 8...:
    # its first three pairs' interval still holds the middle, more pairs decide it bad.
    readings = iter([2.5, 9.0, 8.0, 9.5, 8.5, 9.0, 9.2, 8.8, 9.1, 9.0, 8.9, 9.3])

    def measure(p: str) -> float:
        return next(readings) if p == "c" else {"a": 1.0, "b": 1.0, "d": 10.0}[p]

    res = bisect(["a", "b", "c", "d"], measure)
    c = next(p for p in res.probes if p.point == "c")
    assert c.verdict == "bad" and c.sure and len(c.values) > 3
    assert res.first_bad == "c" and not res.unsure


def test_a_point_that_never_clears_the_middle_is_judged_by_its_mean_and_marked_unsure(capsys):
    # c alternates between good and bad readings: at max_pairs its interval still holds
    # the middle. The answer is given, and says it is unsure; the CLI exits 3.
    flip = {"n": 0}

    def measure(p: str) -> float:
        if p == "c":
            flip["n"] += 1
            return 10.0 if flip["n"] % 2 else 1.2
        return {"a": 1.0, "b": 1.0, "d": 10.0}[p]

    res = bisect(["a", "b", "c", "d"], measure, judging=Judging(min_pairs=2, max_pairs=6))
    c = next(p for p in res.probes if p.point == "c")
    assert len(c.values) == 6 and not c.sure and "unsure" in c.note
    assert res.unsure == ["c"] and res.first_bad in ("c", "d")


POINTS = [f"c{i}" for i in range(1, 9)]  # the 5th is 1.3x slower


def noisy(seed: int, slow_mode: float) -> Measure:
    """Each measurement a fresh process with its own bias (sd 5%), on a machine whose slow
    modes (1.0 or `slow_mode` x, 2-6 measurements each) may change inside a pair."""
    rng = random.Random(seed)
    mode = {"left": 0, "factor": 1.0}

    def measure(p: str) -> float:
        if mode["left"] == 0:
            mode["left"], mode["factor"] = rng.randint(2, 6), rng.choice((1.0, slow_mode))
        mode["left"] -= 1
        step = 1.3 if int(p[1:]) >= 5 else 1.0
        return step * mode["factor"] * math.exp(rng.gauss(0.0, 0.05))

    return measure


def test_a_planted_step_is_found_on_a_machine_with_modes():
    # Modes of 1.2x: pairs that straddle a change read 20% off; the step is 30%.
    named = [bisect(POINTS, noisy(seed, 1.2)) for seed in range(20)]
    found = [r.first_bad == "c5" for r in named]
    assert sum(found) >= 18, [(r.first_bad, r.unsure) for r in named]
    assert all(ok or r.unsure for ok, r in zip(found, named, strict=True))


def test_on_a_machine_too_noisy_to_tell_the_answer_is_never_a_wrong_point_stated_as_sure():
    # Modes of 1.6x, larger than the step: bisect may refuse or be unsure, never wrong.
    for seed in range(20):
        try:
            r = bisect(POINTS, noisy(seed, 1.6))
        except BisectError:
            continue  # "not surely worse": an honest refusal
        assert r.first_bad == "c5" or r.unsure, (seed, r.first_bad, r.probes)


def test_a_point_is_judged_by_its_ratio_to_good_measured_beside_it():
    # The machine gets 1.5x slower after the endpoints: good point "c" then reads 1.5, near
    # the bad endpoint's 1.6 read before; judged against those old numbers it would be
    # bad. Beside the good endpoint, measured as slow, its ratio is 1.0: good.
    clock = {"n": 0}

    def measure(p: str) -> float:
        clock["n"] += 1
        machine = 1.5 if clock["n"] > 2 else 1.0
        return machine * {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.6, "e": 1.6}[p]

    res = bisect(["a", "b", "c", "d", "e"], measure)
    assert res.first_bad == "d"


def test_endpoints_must_differ():
    with pytest.raises(BisectError):
        bisect(["a", "b"], lambda p: 1.0)


def test_parse_value():
    assert parse_value("noise\nvalue=1.5\nvalue = 2e-3\n") == 0.002
    assert parse_value("value=abc") is None


def test_versions_path_is_usage_checked(capsys):
    assert main(["bisect", "--versions", "pkg==1", "--command", "true"]) == 2
    assert main(["bisect", "--command", "true"]) == 2


def test_cli_names_an_unsure_answer_and_exits_3(tmp_path, capsys):
    """Commit 2 of 3 reads good and bad by turns: still unclear at --max-pairs."""
    repo, counter = tmp_path / "repo", tmp_path / "runs"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")
    flip = (
        f"import pathlib\nf = pathlib.Path({str(counter)!r})\n"
        "n = int(f.read_text()) if f.exists() else 0\nf.write_text(str(n + 1))\n"
        'print("value=%s" % (10.0 if n % 2 else 1.2))\n'
    )
    shas = []
    for body in ('print("value=1.0")\n', flip, 'print("value=10.0")\n'):
        (repo / "bench.py").write_text(body)
        git(repo, "add", "bench.py")
        git(repo, "commit", "-q", "-m", "c")
        shas.append(git(repo, "rev-parse", "HEAD"))
    argv = ["bisect", "--git", str(repo), "--good", shas[0], "--bad", shas[2]]
    argv += ["--command", f"{sys.executable} bench.py", "--min-pairs", "2", "--max-pairs", "4"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 3, out
    assert "first bad (unsure):" in out and shas[1][:12] in out and "--max-pairs" in out


def paired(seed: int, bias: float) -> MeasurePair:
    """Cell mode: each call two blocks, each a fresh pair of warm workers whose bursts
    cancel the machine's modes; what is left is each block's pair bias (sd `bias`)."""
    rng = random.Random(seed)
    calls = []

    def measure_pair(good: str, point: str) -> list[tuple[float, float]]:
        calls.append((good, point))
        step = 1.3 if int(point[1:]) >= 5 else 1.0
        return [(step * math.exp(rng.gauss(0.0, bias)), 1.0) for _ in range(2)]

    measure_pair.calls = calls  # type: ignore[attr-defined]
    return measure_pair


def test_cell_mode_takes_blocks_in_pairs_and_looks_where_they_cross_a_look():
    found = []
    for seed in range(20):
        m = paired(seed, 0.05)
        r = bisect(POINTS, measure_pair=m)
        found.append(r.first_bad == "c5" and not r.unsure)
        assert all(good == "c1" for good, _ in m.calls)  # beside the good endpoint, always
        # Two pairs a call: 3 to 12 pairs is 2 to 6 calls a point, never past the cap.
        assert all(len(p.values) % 2 == 0 and len(p.values) <= 12 for p in r.probes)
    assert sum(found) >= 19


def test_cell_mode_skips_a_point_it_cannot_measure():
    def measure_pair(good: str, point: str):
        if point == "c3":
            return None  # its commit does not install
        step = 1.3 if int(point[1:]) >= 5 else 1.0
        return [(step, 1.0), (step * 1.01, 1.0)]

    r = bisect(POINTS, measure_pair=measure_pair)
    assert r.first_bad == "c5"
    assert [p.verdict for p in r.probes if p.point == "c3"] in ([], ["skipped"])


def test_one_way_of_measuring_is_given():
    with pytest.raises(ValueError, match="one of measure or measure_pair"):
        bisect(POINTS)
    with pytest.raises(ValueError, match="one of measure or measure_pair"):
        bisect(POINTS, lambda p: 1.0, measure_pair=lambda g, p: [(1.0, 1.0)])


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--git", ".", "--good", "HEAD~1"], "one of --command CMD or --model MODEL"),
        (["--git", ".", "--good", "HEAD~1", "--command", "true", "--model", "mlp"], "one of"),
        (["--versions", "a==1,a==2", "--model", "mlp"], "give --git REPO"),
    ],
)
def test_cell_mode_is_usage_checked(capsys, argv, needle):
    assert main(["bisect", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


def test_cell_mode_measures_one_cell(repo, tmp_path, capsys):
    path, shas = repo
    db = tmp_path / "b.db"
    argv = ["bisect", "--git", str(path), "--good", shas[0], "--model", "mlp"]
    assert main([*argv, "--backends", "eager,onnxruntime", "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cell mode measures one cell" in err, err
    assert not db.exists()

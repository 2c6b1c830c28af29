"""Bisection: a real git history with a slowdown at commit 7, and the decision rules."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stackcost.cli import main
from stackcost.compare.bisect import BisectError, bisect, git_points, parse_value

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


def test_failing_points_are_skipped_and_near_middle_points_remeasured():
    calls: dict[str, int] = {}
    flaky = iter([5.4, 9.0])  # first reading of "c" near the middle, then clearly bad

    def measure(p: str) -> float | None:
        calls[p] = calls.get(p, 0) + 1
        if p == "b":
            return None
        if p == "c":
            return next(flaky)
        return {"a": 1.0, "d": 10.0, "e": 10.0}[p]

    res = bisect(["a", "b", "c", "d", "e"], measure)
    assert res.first_bad is None and res.candidates == ["b", "c"]  # b failed: ambiguous
    assert calls["c"] == 2 and any(p.verdict == "skipped" for p in res.probes)
    # The good endpoint is measured beside every pair: never judged against an old number.
    assert calls["a"] == sum(len(p.values) for p in res.probes if p.point != "b") + 1


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

"""Bisection to the first bad point: git commits or package versions.

The measurement contract is deliberately small: a shell command that exits 0 and
prints a line `value=<float>` (the last such line counts; lower is better unless told
otherwise). A point whose build, install or command fails is skipped, as `git bisect
skip` would.

Interleaved and sequential: a machine drifts 10-20% over minutes, and each process draws
its own bias of a few percent, so a point is never judged against a number taken earlier,
nor from one pair. The good endpoint is measured again beside every measurement of a
point, in alternating order (good, point; then point, good; ...): each pair gives one
change, log(point / good beside it) (a difference where values may be zero or negative).
The bad endpoint is measured so first, until its change is surely above zero: the gap.
A point is then measured pair by pair until the Student-t interval of its mean change
lies wholly past the middle of the gap (bad) or wholly short of it (good), looked at
after min_pairs, max_pairs and once between (the error budget alpha split over the
looks, as `stackcost ab` does: measure/paired.py). A point still straddling the middle
at max_pairs is judged by its mean, and the answer says it is unsure.

A process per value still carries its own bias and lands in the machine's modes of
seconds. Cell mode (`measure_pair`, api/paired.py) measures a stackcost cell instead:
the point and the good endpoint in warm paired workers alternating bursts, a block of them
giving one pair of values; a call may give several, and a look is taken when the count of
pairs crosses it.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stackcost.measure.paired import look_points, mean_interval

VALUE = re.compile(r"^\s*value\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$", re.M)

Measure = Callable[[str], "float | None"]
# Cell mode: the point and the good endpoint measured together in warm paired workers
# (`stackcost ab`'s bursts): (point, good) values, one pair per block; None on a failure.
MeasurePair = Callable[[str, str], "list[tuple[float, float]] | None"]


class BisectError(Exception):
    """The endpoints cannot be measured or do not differ: nothing to bisect."""


@dataclass(frozen=True)
class Judging:
    """How many pairs a point gets, and the error budget of its sequential verdict."""

    min_pairs: int = 3
    max_pairs: int = 12
    alpha: float = 0.05

    @property
    def looks(self) -> tuple[int, ...]:
        return look_points(self.min_pairs, self.max_pairs)

    @property
    def confidence(self) -> float:
        return 1 - self.alpha / len(self.looks)


@dataclass
class Probe:
    point: str
    values: list[float] = field(default_factory=list)
    good_values: list[float] = field(default_factory=list)  # the good endpoint beside it
    verdict: str = ""  # good, bad, skipped (failed to build/install/measure)
    sure: bool = True  # False: still straddling the middle at max_pairs, judged by the mean
    interval: tuple[float, float] | None = None  # the mean change's, in the worse direction
    note: str = ""

    @property
    def value(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def changes(self, log: bool) -> list[float] | None:
        """Each pair's change of the point against the good measured beside it: the log
        ratio, or the difference where values may be zero or negative (`log` False)."""
        pairs = list(zip(self.values, self.good_values, strict=False))
        if not pairs or (log and any(v <= 0 or g <= 0 for v, g in pairs)):
            return None
        return [math.log(v / g) if log else v - g for v, g in pairs]

    @property
    def ratio(self) -> float | None:
        """The point over the good beside it (geometric mean over pairs); None where a
        value is not positive."""
        c = self.changes(log=True)
        return None if c is None else math.exp(statistics.fmean(c))


@dataclass
class BisectResult:
    points: list[str]
    first_bad: str | None  # None when skipped points leave it ambiguous
    candidates: list[str]  # the range the culprit is in (one point when found)
    probes: list[Probe]
    good_value: float
    bad_value: float
    gap_ratio: float | None  # bad / good, measured interleaved (None: not positive values)
    judging: Judging = field(default_factory=Judging)

    @property
    def unsure(self) -> list[str]:
        """Points judged at max_pairs by their mean, their interval still on the middle."""
        return [p.point for p in self.probes if p.verdict in ("good", "bad") and not p.sure]


def parse_value(stdout: str) -> float | None:
    found = VALUE.findall(stdout)
    return float(found[-1]) if found else None


def run_command(
    command: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> float | None:
    """One measurement by the contract; None when the command fails or prints no value."""
    try:
        proc = subprocess.run(
            command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return None
    return parse_value(proc.stdout) if proc.returncode == 0 else None


def bisect(
    points: Sequence[str],
    measure: Measure | None = None,
    *,
    measure_pair: MeasurePair | None = None,
    judging: Judging = Judging(),
    higher_is_better: bool = False,
    log: Callable[[str], None] = lambda s: None,
) -> BisectResult:
    """Find the first bad point in `points` (first known good, last known bad), measuring
    each value by `measure` (a process per value, alternating with the good endpoint), or
    each pair of values by `measure_pair` (both in warm workers side by side)."""
    if (measure is None) == (measure_pair is None):
        raise ValueError("give one of measure or measure_pair")
    if len(points) < 2:
        raise BisectError("need a good and a bad point")
    search = _Search(points, measure, measure_pair, judging, higher_is_better, log)
    bad, middle = search.gap()
    lo, hi = search.narrow(middle)
    candidates = [points[i] for i in range(lo + 1, hi + 1)]
    return BisectResult(
        list(points),
        candidates[0] if len(candidates) == 1 else None,
        candidates,
        search.probes,
        statistics.median(bad.good_values),
        statistics.median(bad.values),
        bad.ratio if search.in_logs else None,
        judging,
    )


class _Search:
    """One bisection: how a pair is measured, and the probes taken so far."""

    def __init__(
        self,
        points: Sequence[str],
        measure: Measure | None,
        measure_pair: MeasurePair | None,
        judging: Judging,
        higher_is_better: bool,
        log: Callable[[str], None],
    ) -> None:
        self.points, self.judging, self.log = points, judging, log
        self.measure, self.measure_pair = measure, measure_pair
        self.sign = -1.0 if higher_is_better else 1.0
        self.good = points[0]
        self.probes: list[Probe] = []
        self.pairs = 0  # alternates the order of each pair: good first, then point first
        self.in_logs = True  # ratios where every value is positive (a time); set by the first pair

    def gap(self) -> tuple[Probe, float]:
        """The bad endpoint, measured until it is surely worse than good, and the middle
        of the gap between them that every other point is judged against."""
        bad = self.probe(len(self.points) - 1, lambda low, high: low > 0)
        if not bad.values:
            raise BisectError(f"cannot measure the endpoints ({bad.note})")
        c = self.worse(bad)
        gap = statistics.fmean(c) if c else 0.0
        if not c or bad.interval is None or bad.interval[0] <= 0:
            low = "—" if bad.interval is None else f"{bad.interval[0]:+.3g}"
            raise BisectError(
                f"bad ({bad.value:.4g}) is not surely worse than good measured beside it "
                f"({statistics.median(bad.good_values):.4g}) after {len(bad.values)} pairs "
                f"(mean change {gap:+.3g}, lower bound {low}): nothing to bisect"
            )
        bad.verdict = "bad"
        return bad, gap / 2

    def narrow(self, middle: float) -> tuple[int, int]:
        """Halve the range from the last good to the first bad point until they are
        adjacent, or only skipped points lie between: (last good, first bad) indices."""
        lo, hi, skipped = 0, len(self.points) - 1, set[int]()
        while hi - lo > 1:
            inside = [i for i in range(lo + 1, hi) if i not in skipped]
            if not inside:
                break
            m = min(inside, key=lambda i: abs(i - (lo + hi) / 2))
            p = self.probe(m, lambda low, high: low > middle or high < middle)
            c = self.worse(p)
            if c is None or p.verdict == "skipped":
                p.verdict = "skipped"
                skipped.add(m)
                continue
            mean = statistics.fmean(c)
            low, high = p.interval or (-math.inf, math.inf)
            p.sure = low > middle or high < middle
            if not p.sure:
                p.note = (
                    f"unsure: after {len(c)} pairs the change {mean:+.3g} [{low:+.3g}, "
                    f"{high:+.3g}] still holds the middle {middle:+.3g}; judged by its mean"
                )
            if mean > middle:
                p.verdict, hi = "bad", m
            else:
                p.verdict, lo = "good", m
        return lo, hi

    def probe(self, i: int, decided: Callable[[float, float], bool]) -> Probe:
        """Pairs until `decided(low, high)` at a look, or max_pairs, or a failure."""
        p = Probe(self.points[i])
        looked = 0  # looks passed: a measure_pair call may add several pairs at once
        while len(p.values) < self.judging.max_pairs and self.pair(p):
            due = [n for n in self.judging.looks if n <= len(p.values)]
            if len(due) > looked and (c := self.worse(p)) is not None:
                looked = len(due)
                _, low, high = mean_interval(c, self.judging.confidence)
                p.interval = (low, high)
                if decided(low, high):
                    break
        self.probes.append(p)
        shown = p.note if p.value is None else f"{p.value:.4g}"
        if p.ratio is not None:
            shown += f", {p.ratio:.3f}x good beside it over {len(p.values)} pairs"
        self.log(f"{self.points[i]}: {shown}")
        return p

    def worse(self, p: Probe) -> list[float] | None:
        """Each pair's change of `p`, signed so that worse is above zero."""
        c = p.changes(self.in_logs)
        return None if c is None else [self.sign * x for x in c]

    def pair(self, p: Probe) -> bool:
        """Measure the point and the good endpoint beside it; False if either fails."""
        first = not self.probes and not p.values  # the bad endpoint's first pair
        measured = self._cells(p) if self.measure_pair is not None else self._processes(p)
        if measured and first:  # it says whether values are times (logs) or may be <= 0
            self.in_logs = min(p.values[0], p.good_values[0]) > 0
        return measured

    def _cells(self, p: Probe) -> bool:
        """Cell mode: one call gives the pairs of its blocks, both sides in warm workers."""
        assert self.measure_pair is not None
        blocks = self.measure_pair(self.good, p.point)
        if not blocks:
            p.verdict, p.note = "skipped", f"{p.point[:12]} or good failed to measure"
            return False
        odd = next((v for b in blocks for v in b if not math.isfinite(v)), None)
        if odd is not None:
            p.verdict, p.note = "skipped", _not_finite(f"{p.point[:12]} or good", odd)
            return False
        for point_value, good_value in blocks:
            p.values.append(point_value)
            p.good_values.append(good_value)
        return True

    def _processes(self, p: Probe) -> bool:
        """A process per value: the good endpoint and the point, in alternating order."""
        assert self.measure is not None
        good = self.good
        order = (good, p.point) if self.pairs % 2 == 0 else (p.point, good)
        self.pairs += 1
        got = {name: self.measure(name) for name in order}
        if got[p.point] is None or got[good] is None:
            failed = p.point if got[p.point] is None else good
            p.verdict, p.note = "skipped", f"{failed[:12]} failed to build, install or measure"
            return False
        for name, value in got.items():
            if not math.isfinite(value):  # type: ignore[arg-type]
                p.verdict, p.note = "skipped", _not_finite(name[:12], value)  # type: ignore[arg-type]
                return False
        p.values.append(got[p.point])  # type: ignore[arg-type]
        p.good_values.append(got[good])  # type: ignore[arg-type]
        return True


def _not_finite(what: str, value: float) -> str:
    # 1e999 parses as inf: such a value is no measurement, and the point fails with it.
    return f"{what} measured value={value} (not a finite number): failed"


# -- git ------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def git_points(repo: Path, good: str, bad: str) -> list[str]:
    """good, then every commit on the ancestry path to bad, oldest first."""
    try:
        good_sha, bad_sha = _git(repo, "rev-parse", good), _git(repo, "rev-parse", bad)
        path = _git(repo, "rev-list", "--reverse", "--ancestry-path", f"{good_sha}..{bad_sha}")
    except subprocess.CalledProcessError as exc:
        raise BisectError(f"git: {exc.stderr.strip() or exc}") from None
    return [good_sha, *path.split()]


def git_measure(repo: Path, command: str, timeout: float = 600) -> Measure:
    """Measure a commit in a temporary detached worktree (the user's checkout is untouched)."""

    def measure(sha: str) -> float | None:
        with tempfile.TemporaryDirectory(prefix="stackcost-bisect-") as tmp:
            tree = Path(tmp) / "tree"
            try:
                _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), sha)
            except subprocess.CalledProcessError:
                return None
            try:
                return run_command(command, tree, timeout=timeout)
            finally:
                subprocess.run(
                    ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                    capture_output=True,
                )

    return measure


# -- package versions (needs a package index, or --pip-arg --find-links DIR) --------------


def version_measure(
    command: str, root: Path, pip_args: Sequence[str] = (), timeout: float = 600
) -> Measure:
    """Install PKG==V into its own fresh venv under `root`, then run the command with it
    on PATH. Each venv is built once and reused when the point is re-measured."""
    venvs: dict[str, Path | None] = {}

    def venv_for(spec: str) -> Path | None:
        if spec not in venvs:
            d = root / re.sub(r"[^A-Za-z0-9_.-]", "_", spec)
            ok = (
                subprocess.run(
                    [sys.executable, "-m", "venv", str(d)], capture_output=True
                ).returncode
                == 0
                and subprocess.run(
                    [str(d / "bin" / "python"), "-m", "pip", "install", "-q", spec, *pip_args],
                    capture_output=True,
                ).returncode
                == 0
            )
            venvs[spec] = d if ok else None
        return venvs[spec]

    def measure(spec: str) -> float | None:
        d = venv_for(spec)
        if d is None:
            return None
        env = {
            **os.environ,
            "VIRTUAL_ENV": str(d),
            "PATH": f"{d / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        env.pop("PYTHONHOME", None)
        return run_command(command, Path.cwd(), env=env, timeout=timeout)

    return measure

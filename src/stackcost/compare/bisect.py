"""Bisection to the first bad point: git commits or package versions.

The measurement contract is deliberately small: a shell command that exits 0 and
prints a line `value=<float>` (the last such line counts; lower is better unless told
otherwise). A point whose build, install or command fails is skipped, as `git bisect
skip` would.

Interleaved: a machine drifts 10-20% over minutes, so a point is never judged against a
number taken earlier. The good endpoint is measured again beside every point, in
alternating order (good, point; then point, good; ...), and the point is judged by its
ratio to that good measured beside it: bad when the ratio is past the middle (geometric)
of the good-to-bad ratio, which the endpoints gave measured the same way. A point whose
ratio lands near the middle is measured again, another pair, and the median decides.
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

VALUE = re.compile(r"^\s*value\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$", re.M)

Measure = Callable[[str], "float | None"]


class BisectError(Exception):
    """The endpoints cannot be measured or do not differ: nothing to bisect."""


@dataclass
class Probe:
    point: str
    values: list[float] = field(default_factory=list)
    good_values: list[float] = field(default_factory=list)  # the good endpoint beside it
    verdict: str = ""  # good, bad, skipped (failed to build/install/measure)
    note: str = ""

    @property
    def value(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def change(self, log: bool) -> float | None:
        """Median over pairs of the point against the good measured beside it: the log
        ratio, or the difference where values may be zero or negative (`log` False)."""
        pairs = list(zip(self.values, self.good_values, strict=False))
        if not pairs or (log and any(v <= 0 or g <= 0 for v, g in pairs)):
            return None
        return statistics.median(math.log(v / g) if log else v - g for v, g in pairs)

    @property
    def ratio(self) -> float | None:
        """The point over the good beside it (median over pairs); None where not positive."""
        r = self.change(log=True)
        return None if r is None else math.exp(r)


@dataclass
class BisectResult:
    points: list[str]
    first_bad: str | None  # None when skipped points leave it ambiguous
    candidates: list[str]  # the range the culprit is in (one point when found)
    probes: list[Probe]
    good_value: float
    bad_value: float
    gap_ratio: float | None  # bad / good, measured interleaved (None: not positive values)


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
    measure: Measure,
    *,
    repeats: int = 1,
    max_remeasure: int = 2,
    margin: float = 0.25,
    higher_is_better: bool = False,
    log: Callable[[str], None] = lambda s: None,
) -> BisectResult:
    """Find the first bad point in `points` (first known good, last known bad).
    `repeats`: pairs (point and good beside it) per probe; their median ratio decides."""
    if len(points) < 2:
        raise BisectError("need a good and a bad point")
    sign = -1.0 if higher_is_better else 1.0
    good_point = points[0]
    probes: list[Probe] = []
    pairs = 0  # alternates the order of each pair: good first, then point first

    def pair(p: Probe) -> bool:
        """Measure the point and the good endpoint beside it; False if either fails."""
        nonlocal pairs
        order = (good_point, p.point) if pairs % 2 == 0 else (p.point, good_point)
        pairs += 1
        got = {name: measure(name) for name in order}
        if got[p.point] is None or got[good_point] is None:
            failed = p.point if got[p.point] is None else good_point
            p.verdict, p.note = "skipped", f"{failed[:12]} failed to build, install or measure"
            return False
        p.values.append(got[p.point])  # type: ignore[arg-type]
        p.good_values.append(got[good_point])  # type: ignore[arg-type]
        return True

    def probe(i: int, n: int) -> Probe:
        p = Probe(points[i])
        for _ in range(n):
            if not pair(p):
                break
        probes.append(p)
        shown = p.note if p.value is None else f"{p.value:.4g}"
        if p.ratio is not None:
            shown += f", {p.ratio:.3f}x good beside it"
        log(f"{points[i]}: {shown}")
        return p

    bad = probe(len(points) - 1, repeats)
    if not bad.values:
        raise BisectError(f"cannot measure the endpoints ({bad.note})")
    # Ratios where every value is positive (a time); differences otherwise.
    in_logs = min(*bad.values, *bad.good_values) > 0
    gap = sign * (bad.change(in_logs) or 0.0)
    if gap <= 0:
        raise BisectError(
            f"bad ({bad.value:.4g}) is not worse than good measured beside it "
            f"({statistics.median(bad.good_values):.4g})"
        )
    bad.verdict = "bad"
    middle = gap / 2

    lo, hi, skipped = 0, len(points) - 1, set[int]()
    while hi - lo > 1:
        inside = [i for i in range(lo + 1, hi) if i not in skipped]
        if not inside:
            break
        m = min(inside, key=lambda i: abs(i - (lo + hi) / 2))
        p = probe(m, repeats)
        # Too close to the middle to call: another pair, the median decides.
        extra = 0
        while (
            (c := p.change(in_logs)) is not None
            and abs(sign * c - middle) < margin * gap
            and extra < max_remeasure
        ):
            if not pair(p):
                break
            extra += 1
        if extra:
            p.note = f"re-measured {extra}x (near the middle)"
        c = p.change(in_logs)
        if c is None or p.verdict == "skipped":
            p.verdict = "skipped"
            skipped.add(m)
            continue
        if sign * c > middle:
            p.verdict, hi = "bad", m
        else:
            p.verdict, lo = "good", m
    candidates = [points[i] for i in range(lo + 1, hi + 1)]
    return BisectResult(
        list(points),
        candidates[0] if len(candidates) == 1 else None,
        candidates,
        probes,
        statistics.median(bad.good_values),
        statistics.median(bad.values),
        bad.ratio,
    )


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

"""A paired comparison of two sides, measured interleaved, and a bisection built on it.

`ab` measures the same cells on a base and a candidate side (another interpreter, a git
revision installed into its own venv, or this environment with other variables or backend
options) in one invocation, side by side, so the machine's drift hits both alike. By
default each block starts one fresh warm worker a side and alternates short bursts of
steps between them (pacing "bursts"); pacing "processes", and any cell that cannot be cut
into bursts, uses ABBA/BAAB blocks of whole-process repetitions. Each cell's verdict comes
from paired ratios over the blocks.

`bisect` finds the first commit of a range where one cell got worse: each commit is
installed into its own venv and measured beside the good commit in the same paired
workers, two blocks a call, each block one pair of values.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.allocators import GATE_ALLOCATOR
from stackcost.api.grid import IMPORT_TIMEOUT_S, POLICIES, check_policy
from stackcost.cell import ModelRef
from stackcost.compare.bisect import BisectResult, Judging, MeasurePair
from stackcost.errors import SpecError
from stackcost.measure.paired import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_BLOCKS,
    DEFAULT_MIN_BLOCKS,
    DEFAULT_THRESHOLD,
)
from stackcost.runspec.grammar import parse_float
from stackcost.runspec.run import RunSpec, db_problem, model_ref, validate

if TYPE_CHECKING:
    from stackcost.execute.interleave import ABResult, CellPair, Design, OnRepetition
    from stackcost.execute.machine_lock import MachineLock
    from stackcost.execute.runner import OnRetry
    from stackcost.execute.sides import Side

__all__ = [
    "BLOCKS",
    "BLOCK_S",
    "BURST_MS",
    "DEFAULT_ALPHA",
    "DEFAULT_THRESHOLD",
    "GATE_ALLOCATOR",
    "IMPORT_TIMEOUT_S",
    "MAX_BLOCKS",
    "POLICIES",
    "ab",
    "ab_design",
    "ab_fields",
    "bisect",
    "cell_fields",
    "cell_pairs",
    "cell_spec",
    "check_blocks",
    "check_pacing",
    "check_policy",
    "flagged",
    "measure_sides",
    "resolve_sides",
    "side_specs",
]

# Blocks (first look, cap) by pacing. A burst block is two fresh workers and BLOCK_S of
# bursts (about 6-8 s); per-process bias means many short blocks beat a few long ones.
BLOCKS = {"bursts": (6, 20), "processes": (DEFAULT_MIN_BLOCKS, DEFAULT_MAX_BLOCKS)}
MAX_BLOCKS = 1_000
BLOCK_S = 2.0  # bursts: seconds each block alternates bursts for
BURST_MS = 20.0  # bursts: a burst's length in ms (at least one step)

Lock = Callable[[], "MachineLock"]
OnLine = Callable[[str], None]


def _ignore(line: str) -> None:
    pass


def _venv_cache() -> Path:
    """Where git:REF sides get their venvs, shared by every ab and bisect."""
    return Path.home() / ".cache" / "stackcost" / "ab-venvs"


# -- the design: how blocks are measured and a verdict decided ----------------------------


def check_pacing(pacing: str) -> None:
    """Raise SpecError unless `pacing` is "bursts" or "processes"."""
    from stackcost.execute.interleave import PACINGS

    if pacing not in PACINGS:
        raise SpecError(f"--pacing {pacing!r}: allowed: {', '.join(PACINGS)}")


def check_blocks(min_blocks: int, max_blocks: int) -> None:
    """Raise SpecError when the cap is past MAX_BLOCKS or below the first look."""
    if max_blocks > MAX_BLOCKS:
        raise SpecError(f"--max-blocks {max_blocks} is more than {MAX_BLOCKS}")
    if min_blocks > max_blocks:
        raise SpecError(f"--min-blocks {min_blocks} is more than --max-blocks {max_blocks}")


def ab_design(
    *,
    pacing: str = "bursts",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    min_blocks: int | None = None,
    max_blocks: int | None = None,
    block_s: float = BLOCK_S,
    burst_ms: float = BURST_MS,
    bind_threads: bool = True,
    same_cores: bool = True,
    replan: bool = True,
    allocator: str = GATE_ALLOCATOR,
    seed: int = 0,
) -> Design:
    """How an A/B is measured and decided, checked; stored with the pair.

    Args:
        pacing: "bursts" (each block a fresh warm worker per side, alternating short
            bursts of steps) or "processes" (each block 4 whole repetitions, ABBA or BAAB).
        threshold: the relative latency change that counts, in (0, 1).
        alpha: the error budget over all looks, in (0, 1).
        min_blocks: blocks before the first look (default: the pacing's, BLOCKS).
        max_blocks: the cap on blocks per cell (default: the pacing's, BLOCKS).
        block_s: bursts: seconds each block alternates bursts for.
        burst_ms: bursts: a burst's length in ms, at least one step.
        bind_threads: bursts: bind torch's OpenMP threads one per core.
        same_cores: bursts: pin both workers of a cell narrower than the host to the same
            cores, drawn per block.
        replan: bursts: reshape an undecided cell's blocks at the first look.
        allocator: both sides' workers' memory allocator.
        seed: the seed of the block orders.

    Raises SpecError on a value out of range.
    """
    from stackcost.execute.interleave import Design

    check_pacing(pacing)
    default_lo, default_hi = BLOCKS[pacing]
    lo = default_lo if min_blocks is None else min_blocks
    hi = default_hi if max_blocks is None else max_blocks
    if lo < 2:
        raise SpecError(f"--min-blocks {lo} must be greater than 1")
    check_blocks(lo, hi)
    return Design(
        threshold=parse_float(threshold, "--threshold", 0.0, 1.0),
        alpha=parse_float(alpha, "--alpha", 0.0, 1.0),
        min_blocks=lo,
        max_blocks=hi,
        seed=seed,
        pacing=pacing,
        block_s=parse_float(block_s, "--block-time", 0.0, 600.0),
        burst_ms=parse_float(burst_ms, "--burst-ms", 0.0, 60_000.0),
        bind_threads=bind_threads,
        same_cores=same_cores,
        replan=replan,
        allocator=allocator,
    )


# -- ab: two sides of one grid ---------------------------------------------------------------


def ab_fields(fields: Mapping[str, Any], allocator: str = GATE_ALLOCATOR) -> dict[str, Any]:
    """RunSpec fields (models aside) as ab measures them: the gate's allocator unless one
    is given, and every backend for "all". Raises SpecError for run's repetition rules
    (repeats, cell_ci, max_repeats): ab measures blocks until the verdict is clear."""
    from stackcost.backends import REGISTRY

    fields = dict(fields)
    # The gate's workers reuse the pages they touched: a process's draw of glibc's moving
    # thresholds must not decide a verdict (stackcost.allocators).
    fields.setdefault("allocator", allocator)
    if fields.get("repeats", 1) != 1:
        raise SpecError(
            f"--repeats {fields['repeats']} does not apply to ab: it measures blocks of 4 "
            "repetitions until the verdict is clear (--min-blocks, --max-blocks)"
        )
    if "cell_ci" in fields or "max_repeats" in fields:
        raise SpecError(
            "--cell-ci and --max-repeats are run's stop rule; ab measures blocks until the "
            "verdict is clear (--min-blocks, --max-blocks)"
        )
    if fields.get("backends") == "all":
        fields["backends"] = list(REGISTRY)
    return fields


def resolve_sides(
    base: str | None = None,
    cand: str | None = None,
    *,
    base_env: Sequence[str] = (),
    cand_env: Sequence[str] = (),
    base_options: Sequence[str] = (),
    cand_options: Sequence[str] = (),
    repo: str | Path = ".",
    on_log: OnLine = _ignore,
) -> dict[str, Side]:
    """The base and candidate sides, each checked (its python starts and has stackcost).

    `base`, `cand`: a Python interpreter with stackcost installed, "git:REF" (the project
    of `repo` at REF, installed into its own venv over this one's packages, built once and
    cached), or None for this environment. `*_env`: KEY=VALUE items the side's workers get;
    `*_options`: BACKEND.KEY=VALUE backend options for that side only. `on_log` gets a
    line as a venv is built. Raises SpecError on a bad side."""
    from stackcost.execute.sides import resolve

    given = {
        "base": (base, base_env, base_options),
        "cand": (cand, cand_env, cand_options),
    }
    return {
        side: resolve(side, where, env, options, repo=Path(repo), cache=_venv_cache(), log=on_log)
        for side, (where, env, options) in given.items()
    }


def side_specs(
    fields: Mapping[str, Any], model: ModelRef, sides: Mapping[str, Side]
) -> dict[str, RunSpec]:
    """Each side's RunSpec: `fields` and `model`, with the side's own backend options laid
    over the shared ones. Raises SpecError on bad input."""
    specs = {}
    for side, s in sides.items():
        options = {b: dict(kv) for b, kv in fields.get("backend_options", {}).items()}
        for backend, kv in s.options.items():
            options.setdefault(backend, {}).update(kv)
        specs[side] = validate({**fields, "backend_options": options, "models": [model]})
    return specs


def measure_sides(
    specs: Mapping[str, RunSpec],
    sides: Mapping[str, Side],
    design: Design,
    db: str | Path,
    lock: MachineLock | None = None,
    *,
    on_disturbed: str = "retry",
    reuse: bool = True,
    import_timeout_s: float = IMPORT_TIMEOUT_S,
    on_repetition: OnRepetition | None = None,
    on_retry: OnRetry | None = None,
    command: str = "",
) -> ABResult:
    """Both sides' specs measured interleaved into the store `db`: the paired result.

    `lock` (default: the machine-wide one, waiting) is held around each repetition;
    `reuse` False starts cold workers and skips the artifact cache. `on_repetition(block,
    pair, side, result)` hears each repetition, `on_retry(cell, result, attempt, of)`
    each one measured again because the machine was disturbed."""
    from stackcost.execute.interleave import interleave
    from stackcost.execute.local import LocalExecutor
    from stackcost.execute.runner import Runner, prepare
    from stackcost.store.database import Store

    prepared = {
        side: prepare(spec, import_timeout_s=import_timeout_s, python=sides[side].python)
        for side, spec in specs.items()
    }
    executors = {
        side: LocalExecutor(
            python=s.python,
            lock=lock,
            worker_start="warm" if reuse else "cold",
            extra_env=s.env,
        )
        for side, s in sides.items()
    }
    with (
        Store(db) as store,
        executors["base"].session(),
        executors["cand"].session(),
    ):
        runners = {
            side: Runner(
                prepared[side],
                store,
                executors[side],
                None,
                None,
                on_disturbed=on_disturbed,
                on_retry=on_retry,
                reuse_artifacts=reuse,
            )
            for side in sides
        }
        return interleave(
            runners, dict(sides), design, command=command, on_repetition=on_repetition
        )


def ab(
    model: str | ModelRef,
    fields: Mapping[str, Any] | None = None,
    design: Design | None = None,
    *,
    base: str | None = None,
    cand: str | None = None,
    base_env: Sequence[str] = (),
    cand_env: Sequence[str] = (),
    base_options: Sequence[str] = (),
    cand_options: Sequence[str] = (),
    repo: str | Path = ".",
    db: str | Path = "stackcost.db",
    lock: Lock | None = None,
    on_disturbed: str = "retry",
    reuse: bool = True,
    import_timeout_s: float = IMPORT_TIMEOUT_S,
    on_log: OnLine = _ignore,
    on_sides: Callable[[dict[str, Side]], None] | None = None,
    on_repetition: OnRepetition | None = None,
    on_retry: OnRetry | None = None,
    command: str = "stackcost.api.paired.ab()",
) -> ABResult:
    """Measure `model` on a base and a candidate side, interleaved, and judge each cell.

    Args:
        model: a zoo name or module:factory, or a ModelRef.
        fields: RunSpec fields of the grid (backends, batch_sizes, threads, ...), models
            aside (ab_fields says which apply).
        design: how blocks are measured and decided (default: ab_design()).
        base, cand, base_env, cand_env, base_options, cand_options, repo: the sides
            (resolve_sides).
        db: the store both sides' runs and the pair go to.
        lock: makes the machine lock, once the sides are ready (default: the
            machine-wide one, waiting).
        on_disturbed: "retry", "keep" or "fail" a repetition the machine disturbed.
        reuse: warm workers and the artifact cache (False: cold workers, no cache).
        import_timeout_s: how long importing the user's code may take.
        on_log: a line as a side's venv is built.
        on_sides: the sides, resolved, before anything is measured.
        on_repetition, on_retry: progress (measure_sides).
        command: the command line stored with the pair.

    Returns the ABResult: its `outcome` is "regressed", "undecided" or "passed".
    Raises SpecError on bad input before anything is written.
    """
    design = ab_design() if design is None else design
    check_policy(on_disturbed)
    fields = ab_fields(fields or {}, design.allocator)
    if problem := db_problem(db):
        raise SpecError(problem)
    if isinstance(model, str):
        model = model_ref(model)
    sides = resolve_sides(
        base,
        cand,
        base_env=base_env,
        cand_env=cand_env,
        base_options=base_options,
        cand_options=cand_options,
        repo=repo,
        on_log=on_log,
    )
    specs = side_specs(fields, model, sides)
    if on_sides is not None:
        on_sides(sides)
    return measure_sides(
        specs,
        sides,
        design,
        db,
        lock() if lock is not None else None,
        on_disturbed=on_disturbed,
        reuse=reuse,
        import_timeout_s=import_timeout_s,
        on_repetition=on_repetition,
        on_retry=on_retry,
        command=command,
    )


def flagged(result: ABResult) -> list[CellPair]:
    """The cells a CI gate names: regressed, newly failing, or undecided (noisy)."""
    from stackcost.execute.interleave import FAILING, UNDECIDED

    return [c for c in result.cells if c.verdict in (*FAILING, *UNDECIDED)]


# -- bisect: one cell along a range of commits -------------------------------------------------


def cell_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """RunSpec fields (models aside) as a cell-mode bisection measures them: the gate's
    allocator unless one is given. Raises SpecError for run's stop rule (cell_ci,
    max_repeats)."""
    fields = dict(fields)
    fields.setdefault("allocator", GATE_ALLOCATOR)  # as ab's (stackcost.allocators)
    if "cell_ci" in fields or "max_repeats" in fields:
        raise SpecError("--cell-ci and --max-repeats are run's stop rule, not bisect's")
    return fields


def cell_spec(fields: Mapping[str, Any], model: str | ModelRef) -> RunSpec:
    """The RunSpec of the one cell a bisection measures at each commit. Raises SpecError
    when the fields make more than one cell."""
    fields = cell_fields(fields)
    spec = validate({**fields, "models": [model_ref(model) if isinstance(model, str) else model]})
    _one_cell(spec)
    return spec


def _one_cell(spec: RunSpec) -> None:
    if len(spec.cells()) != 1:
        raise SpecError(
            f"cell mode measures one cell, and these flags make {len(spec.cells())}: give "
            "one backend, batch size, precision, thread count and size"
        )


def cell_pairs(
    repo: str | Path,
    spec: RunSpec,
    *,
    db: str | Path = "stackcost.db",
    lock: MachineLock | None = None,
    seed: int = 0,
    on_log: OnLine = _ignore,
    on_notice: OnLine = _ignore,
    command: str = "",
) -> MeasurePair:
    """Cell mode's measure_pair (compare.bisect): the cell of `spec` at the good commit
    and at a point, each installed into its own venv, measured in warm paired workers
    (ab's bursts, two blocks a call) into `db`; each block's geometric means, (point,
    good). None when either side cannot be built or measured (`on_notice` says why)."""
    import functools

    from stackcost.execute.interleave import Design
    from stackcost.execute.runner import prepare
    from stackcost.execute.sides import resolve

    # Each call's blocks get burst orders of their own, from `seed` on.
    seeds = itertools.count(1000 * seed)
    prepared: dict[str, Any] = {}  # per commit: its probe (in its venv) asked once

    @functools.cache  # a commit's venv is checked (a python started) once, not every call
    def side(name: str, sha: str) -> Side:
        return resolve(name, f"git:{sha}", [], [], repo=Path(repo), cache=_venv_cache(), log=on_log)

    def spec_at(sha: str, python: str) -> Any:
        if sha not in prepared:
            prepared[sha] = prepare(spec, python=python)
        return prepared[sha]

    def measure_pair(good: str, point: str) -> list[tuple[float, float]] | None:
        try:
            sides = {"base": side("base", good), "cand": side("cand", point)}
            specs = {"base": spec_at(good, sides["base"].python)}
            specs["cand"] = spec_at(point, sides["cand"].python)
        except SpecError as exc:  # it does not install or import: skipped, as git bisect skip
            on_notice(f"{point[:12]}: {exc}")
            return None
        design = Design(min_blocks=2, max_blocks=2, seed=next(seeds), block_s=BLOCK_S,
                        burst_ms=BURST_MS, allocator=spec.allocator)  # fmt: skip
        ab = measure_sides(specs, sides, design, db, lock, command=command)
        cell = ab.cells[0]
        if cell.failed or not cell.blocks:
            return None
        return [
            (statistics.geometric_mean(cand), statistics.geometric_mean(base))
            for base, cand in cell.blocks
        ]

    return measure_pair


def bisect(
    commits: Sequence[str],
    spec: RunSpec,
    *,
    repo: str | Path = ".",
    db: str | Path = "stackcost.db",
    judging: Judging | None = None,
    higher_is_better: bool = False,
    seed: int = 0,
    lock: Lock | None = None,
    on_measured: OnLine = _ignore,
    on_log: OnLine = _ignore,
    on_notice: OnLine = _ignore,
    command: str = "stackcost.api.paired.bisect()",
) -> BisectResult:
    """Find the first of `commits` where the one cell of `spec` got worse.

    Args:
        commits: the good commit first, then every commit on the way to the bad one,
            oldest first (compare.bisect.git_points(repo, good, bad) lists them).
        spec: the one cell measured at each commit (cell_spec).
        repo: the git repository the commits are of.
        db: the store every pair's runs go to.
        judging: how many pairs a commit gets, and its verdict's error budget
            (default: Judging()).
        higher_is_better: the cell's value is better higher (never so for a latency).
        seed: the seed of the burst orders.
        lock: makes the machine lock (default: the machine-wide one, waiting).
        on_measured: a line per commit measured, its value and ratio to good.
        on_log: a line as a commit's venv is built.
        on_notice: a line per commit skipped, and why.
        command: the command line stored with each pair.

    Raises SpecError on bad input before anything is written, and BisectError
    (compare.bisect) when the endpoints cannot be measured or do not differ.
    """
    from stackcost.compare.bisect import bisect as search

    _one_cell(spec)
    if problem := db_problem(db):
        raise SpecError(problem)
    measure_pair = cell_pairs(
        repo,
        spec,
        db=db,
        lock=lock() if lock is not None else None,
        seed=seed,
        on_log=on_log,
        on_notice=on_notice,
        command=command,
    )
    return search(
        commits,
        measure_pair=measure_pair,
        judging=judging or Judging(),
        higher_is_better=higher_is_better,
        log=on_measured,
    )

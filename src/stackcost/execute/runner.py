"""Run a spec: plan the repetitions, feed them to an executor, commit each result.

Resume: with `resume=True` a run with the same spec in the same environment is
continued, and only the repetitions it lacks are run. Every result is committed in
its own transaction the moment it arrives, so a SIGKILL loses at most the repetition
in flight.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stackcost.allocators import DEFAULT_ALLOCATOR
from stackcost.backends.base import BackendFacts
from stackcost.cell import Cell
from stackcost.env import collect, fingerprint, now
from stackcost.errors import SpecError
from stackcost.execute import scratch
from stackcost.execute.environ import recorded, worker_environ
from stackcost.execute.local import Executor, LocalExecutor, failed
from stackcost.execute.plan import Plan
from stackcost.execute.probe import TIMEOUT_S as IMPORT_TIMEOUT_S
from stackcost.execute.probe import Answers, ask
from stackcost.measure.disturbance import MAX_RETRIES, Attempt, wait_for_quiet
from stackcost.result import RateFigures, RepetitionResult
from stackcost.runspec.run import RunSpec
from stackcost.scenarios.task import RepetitionTask
from stackcost.serving.engines import why_not as serve_problem
from stackcost.store.runs import RunResult, superseded_dropped

if TYPE_CHECKING:
    from stackcost.runspec.train import TrainSpec
from stackcost.store.database import Store

# Called after each stored repetition: (cell, result, done, total).
OnResult = Callable[[Cell, RepetitionResult, int, int], None]
# Called before each repetition starts: (cell, repetition index).
OnStart = Callable[[Cell, int], None]
# Builds the task for (cell, repetition, workdir); training passes its own (TrainTask).
MakeTask = Callable[[Cell, int, str], RepetitionTask]
# Called when a disturbed repetition is tried again: (cell, result, try number, of how many).
OnRetry = Callable[[Cell, RepetitionResult, int, int], None]


def _device_reason(device: str) -> str | None:
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return (
                "no CUDA device here (torch.cuda.is_available() is False): run on a machine "
                "with an NVIDIA GPU and a CUDA build of torch, e.g. "
                "pip install torch --index-url https://download.pytorch.org/whl/cu130"
            )
    return None


def why_not_runnable(cell: Cell, facts: dict[str, BackendFacts]) -> tuple[str, str] | None:
    """(status, reason) for a cell that cannot run, decided without spawning a worker."""
    backend = facts[cell.backend]
    if not backend.ok:
        return "unavailable", backend.reason
    problem = backend.why_not(cell)
    if problem is None and cell.serve is not None:
        problem = serve_problem(cell)
    if problem:
        return "unsupported", problem
    device = _device_reason(cell.device)
    return ("unavailable", device) if device else None


def machine_peaks(
    env: dict, threads: list[int], devices: list[str] | None = None
) -> dict[str, dict]:
    """This machine's measured FLOP/s and bandwidth per thread count, and the GPU's under
    "cuda" when a cell runs there, stored with the run's environment (measured once per
    environment, then read from the cache). The GPU's are measured in a child process; if
    that fails, the run goes on without them and env["gpu_peaks_error"] says why."""
    from stackcost.measure.peaks import gpu_key, load_or_measure, load_or_measure_gpu

    env_fp = fingerprint(env)
    out = {str(t): load_or_measure(env_fp, t).model_dump(mode="json") for t in sorted(set(threads))}
    if "cuda" in (devices or []) and _device_reason("cuda") is None:
        try:
            out["cuda"] = load_or_measure_gpu(env_fp, gpu_key(env)).model_dump(mode="json")
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            env["gpu_peaks_error"] = f"GPU peaks not measured: {exc}"
    return out


@dataclass(frozen=True)
class Prepared:
    """A spec ready to run: its user code asked about, once (prepare)."""

    spec: RunSpec | TrainSpec  # with the workloads learned in the child filled in
    facts: dict[str, BackendFacts]  # every backend's, by name


def prepare(
    spec: RunSpec | TrainSpec | Prepared,
    answers: Answers | None = None,
    import_timeout_s: float = IMPORT_TIMEOUT_S,
    python: str = sys.executable,
) -> Prepared:
    """The one place a run asks about user code, before anything is written: one child at
    most (execute/probe.py) learns user models' workloads, then checked against the spec's
    sizes, and custom backends' facts, their options included. Validation spawns nothing,
    so reading a spec back (views) never probes. SpecError (a ProbeError) on bad input.

    `answers`: what that one ask already learned of this spec's models and backends (with
    the options it gives them), where building the spec needed them first (`train`: the
    model sets the sizes and data); they are checked here, not asked again. A spec already
    prepared is returned as it is. `import_timeout_s` bounds the child's import of user
    code (--import-timeout); `python` is the interpreter whose workers will run the spec
    (an A/B side's), so the child imports what they will."""
    from stackcost.runspec.run import check_generate, check_sizes

    if isinstance(spec, Prepared):
        return spec
    if answers is None:
        backends = {name: spec.backend_options.get(name, {}) for name in spec.backends}
        # A TrainSpec's model is asked as its spec is built (it sets the sizes): `answers`.
        models = spec.models if isinstance(spec, RunSpec) else []
        environ = worker_environ(os.environ, {}, spec.inherit_env)
        answers = ask(models, backends, environ, import_timeout_s, python)
    for fact in answers.facts.values():
        if fact.options_problem:
            raise SpecError(fact.options_problem)
    if isinstance(spec, RunSpec):
        # Part of the spec (and its digest), as when validation learned them.
        spec = spec.model_copy(update={"learned": {**spec.learned, **answers.workloads}})
        check_sizes(spec.sizes, [spec.workload(m) for m in spec.models])
        check_generate(spec)  # what the probe learned: a decoder's LM head, its experts
    check_runnable(spec.cells(), answers.facts)
    return Prepared(spec, answers.facts)


def check_runnable(cells: list[Cell], facts: dict[str, BackendFacts]) -> None:
    """SpecError when no cell can run here: a run of nothing but unavailable and
    unsupported cells measures nothing, so it is said in one line and nothing is stored.
    A run where some cell can run stores the others with their reasons."""
    from stackcost.result import headline

    reasons: Counter[str] = Counter()
    for cell in cells:
        blocked = why_not_runnable(cell, facts)
        if blocked is None:
            return
        reasons[f"{blocked[0]}: {headline(blocked[1])}"] += 1
    if reasons:
        first, n = next(iter(reasons.items()))
        more = f"; and {len(reasons) - 1} other reason(s)" if len(reasons) > 1 else ""
        cells_n = f"{len(cells)} cell{'s' if len(cells) != 1 else ''}"
        raise SpecError(f"no cell can run here ({cells_n}): {n} {first}{more}")


class Runner:
    """One execution of a prepared spec against a store; holds the run's bookkeeping."""

    def __init__(
        self,
        prepared: Prepared,
        store: Store,
        executor: Executor,
        on_start: OnStart | None,
        on_result: OnResult | None,
        make_task: MakeTask | None = None,
        on_disturbed: str = "retry",
        on_retry: OnRetry | None = None,
        reuse_artifacts: bool = True,
        keep_artifacts: Path | None = None,
    ) -> None:
        self.spec, self.store, self.executor = prepared.spec, store, executor
        self.reuse_artifacts = reuse_artifacts
        self.keep_artifacts = keep_artifacts
        self.make_task = make_task or self._inference_task
        self.on_start, self.on_result, self.on_retry = on_start, on_result, on_retry
        self.on_disturbed = on_disturbed
        self.stopped = ""  # why the run stopped early (--on-disturbed fail)
        self.plan = Plan(self.spec)
        # A training spec has no allocator setting: its workers get glibc's as it is.
        self.allocator: str = getattr(self.spec, "allocator", DEFAULT_ALLOCATOR)
        self.cell_ids: dict[str, int] = {}
        self.facts = prepared.facts
        self.done = 0
        self.total = 0

    def open(self, command: str, resume: bool, annotate: dict | None = None) -> tuple[str, bool]:
        """The run to write into (resumed or new), and whether it was resumed. `annotate`
        is stored in a new run's environment record (an A/B side: what it adds)."""
        env = collect(self.spec.threads) | (annotate or {})
        spec_hash, env_fp = self.spec.digest(), fingerprint(env)
        run_id = self.store.find_run(spec_hash, env_fp) if resume else None
        if run_id is None:
            # Peaks for the profile's roofline, and for generate's bandwidth fraction.
            spec = self.spec
            generates = "generate" in (*getattr(spec, "modes", ()), *getattr(spec, "scenarios", ()))
            if getattr(self.spec, "profile", False) or generates:
                env["peaks"] = machine_peaks(env, self.spec.threads, spec.devices)
            # What every worker inherits (thread settings are per cell, in each result).
            # An A/B side's executor adds its own variables: they are part of the record.
            inherited = worker_environ(os.environ, {}, self.spec.inherit_env)
            extra = getattr(self.executor, "extra_env", {})
            env["worker_environ"] = recorded({**inherited, **extra})
            spec_json = self.spec.model_dump(mode="json")
            return self.store.create_run(spec_json, env, command, spec_hash, env_fp), False
        # The stop rule over processes reads the stored repetitions' samples (their spreads).
        samples = self.plan.cell_ci is not None
        stored = list(self.store.repetitions(run_id, with_samples=samples))
        for cell, result in superseded_dropped(stored):
            self.plan.observe(cell, result, replayed=True)
            self.done += not result.owed
        return run_id, True

    def _cell_id(self, run_id: str, cell: Cell) -> int:
        key = cell.key()
        if key not in self.cell_ids:
            self.cell_ids[key] = self.store.add_cell(run_id, cell)
        return self.cell_ids[key]

    def _record(self, run_id: str, cell: Cell, result: RepetitionResult) -> None:
        cell_id = self._cell_id(run_id, cell)
        if cell.serve is not None and result.serving is None and not result.valid:
            self._keep_rates(cell_id, result)
        self.store.add_repetition(cell_id, result)
        self.plan.observe(cell, result)
        self.done += 1
        self.total = max(self.total, self.done)
        if self.on_result:
            self.on_result(cell, result, self.done, self.total)

    def _keep_rates(self, cell_id: int, result: RepetitionResult) -> None:
        """A sweep that stopped: the try says how many finished rates it keeps, so that a
        resume goes on from them (RepetitionResult.owed). They are the store's progress:
        those the executor handed on as they ended, and the result's own (kept_rates, both
        from rate 0 on), which add_repetition adds."""
        stored = len(self.store.progress(cell_id, result.repetition))
        if kept := max(stored, len(result.kept_rates)):
            result.details["rates_kept"] = kept
            result.reason += (
                f" ({kept} finished rate{'s' * (kept != 1)} kept in the store: "
                "--resume runs the rest)"
            )

    def _progress(self, run_id: str, task: RepetitionTask, index: int, rate: RateFigures) -> None:
        """A rate of a sweep still running, committed as it ends."""
        self.store.add_progress(self._cell_id(run_id, task.cell), task.repetition, index, rate)

    def _tasks(self, run_id: str, artifacts: Path) -> Iterator[RepetitionTask | None]:
        for i, pair in enumerate(self.plan.next_cells()):
            if pair is None:  # the plan waits on a result in flight (concurrent executors)
                yield None
                continue
            cell, rep = pair
            task = self._task(run_id, cell, rep, artifacts / f"{i}-{rep}")
            if isinstance(task, RepetitionTask):
                yield task

    def _task(
        self, run_id: str, cell: Cell, rep: int, workdir: Path
    ) -> RepetitionTask | RepetitionResult:
        """The task of one repetition, or the stored result of one that cannot run."""
        if (blocked := self._blocked(run_id, cell, rep)) is not None:
            return blocked
        if self.on_start:
            self.on_start(cell, rep)
        task = self.make_task(cell, rep, str(workdir))
        update: dict = {"inherit_env": self.spec.inherit_env, "allocator": self.allocator}
        if cell.serve is not None:  # a resumed sweep goes on from its finished rates
            update["kept_rates"] = self.store.progress(self._cell_id(run_id, cell), rep)
        if protocol := self.plan.protocol_for(cell, rep):
            update["protocol"] = protocol  # a repetition the stop rule over processes added
        return task.model_copy(update=update)

    def _blocked(self, run_id: str, cell: Cell, rep: int) -> RepetitionResult | None:
        """The stored result of a repetition that cannot run; None when it can."""
        self._cell_id(run_id, cell)
        blocked = why_not_runnable(cell, self.facts)
        skipped = self.plan.skip_reason(cell)
        if not (blocked or skipped):
            return None
        status, reason = blocked or ("skipped", skipped)
        result = RepetitionResult(
            status=status,  # type: ignore[arg-type]
            reason=reason,
            repetition=rep,
            started_at=now(),
            finished_at=now(),
        )
        self._record(run_id, cell, result)
        return result

    def task_for(
        self, run_id: str, cell: Cell, rep: int, artifacts: Path
    ) -> RepetitionTask | RepetitionResult:
        """The task of one repetition the caller runs itself (ab's paced workers), or the
        stored result of one that cannot run. The caller stores what it gets (record)."""
        return self._task(run_id, cell, rep, artifacts / f"{self._cell_id(run_id, cell)}-{rep}")

    def record(self, run_id: str, cell: Cell, result: RepetitionResult) -> None:
        """Store a repetition the caller ran (task_for)."""
        self._record(run_id, cell, result)

    def run_one(self, run_id: str, cell: Cell, rep: int, artifacts: Path) -> RepetitionResult:
        """One repetition of one cell, stored, in the order the caller chooses rather than
        the plan's: an interleaved A/B alternates two runners repetition by repetition.
        `artifacts`: the run's scratch directory (its cache is shared by the cell's
        repetitions)."""
        task = self.task_for(run_id, cell, rep, artifacts)
        if isinstance(task, RepetitionResult):
            return task
        _, result = next(iter(self.executor.map([task])))
        if self.on_disturbed == "retry":
            result = self._retried(run_id, task, result)
        self._record(run_id, cell, result)
        scratch.remove(task.workdir)
        if result.status == "interrupted":
            raise KeyboardInterrupt
        return result

    def _cache_dir(self, workdir: str) -> str | None:
        """Where the cells' artifacts are filed: the kept directory, or the run's scratch."""
        if not self.reuse_artifacts:
            return None
        return str(self.keep_artifacts or Path(workdir).parent / "cache")

    def _inference_task(self, cell: Cell, rep: int, workdir: str) -> RepetitionTask:
        return RepetitionTask(
            cell=cell,
            repetition=rep,
            protocol=self.spec.protocol,
            tolerance=self.spec.tolerance.get(cell.precision, 1e-4),
            timeout_s=self.spec.timeout_s,
            workdir=workdir,
            cache_dir=self._cache_dir(workdir),
            profile=self.spec.profile,
            sample_interval_s=self.spec.sample_interval_ms / 1e3,
        )

    def _retried(self, run_id: str, task: RepetitionTask, result: RepetitionResult):
        """--on-disturbed retry: store the disturbed try (nothing measured is lost; views
        show the last try of a repetition), wait for a quiet machine, try again."""
        attempts: list[Attempt] = []
        while result.status == "disturbed" and len(attempts) < MAX_RETRIES:
            assert result.disturbance is not None
            self.store.add_repetition(self._cell_id(run_id, task.cell), result)
            attempts.append(
                Attempt(
                    others_cores=result.disturbance.others_cores,
                    median_ms=result.stats.median_ms if result.stats else None,
                    finished_at=result.finished_at,
                )
            )
            if self.on_retry:
                self.on_retry(task.cell, result, len(attempts), MAX_RETRIES)
            try:
                # A cluster executor waits on the node that runs the retry, not here.
                getattr(self.executor, "wait_for_quiet", wait_for_quiet)()
            except KeyboardInterrupt:
                # Ctrl-C before the retry began: the repetition is still owed, so it is
                # stored as interrupted (a resume runs it again), not left as disturbed.
                return failed(
                    task,
                    now(),
                    "interrupted",
                    "interrupted by Ctrl-C while waiting for a quiet machine to retry",
                )
            _, result = next(iter(self.executor.map([task])))
        if attempts and result.disturbance is not None:
            result.disturbance.attempts = attempts
        return result

    def run(self, run_id: str) -> bool:
        """Run what is missing; False when interrupted."""
        self.total = max(self.plan.total(), self.done)
        scratch.clean_orphans()  # what killed runs left behind
        artifacts = scratch.make()
        if hasattr(self.executor, "on_progress"):  # it reads progress as it lands
            self.executor.on_progress = lambda task, i, rate: self._progress(run_id, task, i, rate)
        try:
            for task, result in self.executor.map(self._tasks(run_id, artifacts)):
                if self.on_disturbed == "retry":
                    result = self._retried(run_id, task, result)
                if self.plan.cell_ci is not None and task.protocol != self.spec.protocol:
                    result.details["min_time_s"] = task.protocol.min_time_s  # the rule's time
                self._record(run_id, task.cell, result)
                scratch.remove(task.workdir)  # exported models: up to 100s of MB each
                if result.status == "interrupted":
                    return False
                if result.status == "disturbed" and self.on_disturbed == "fail":
                    self.stopped = (
                        f"{task.cell.label()} #{task.repetition} was {result.reason}; "
                        "--on-disturbed fail stops the run here"
                    )
                    return True
            return True
        finally:
            scratch.remove(artifacts)
            self.store.finish_run(run_id)


def execute(
    spec: RunSpec | TrainSpec | Prepared,
    store: Store,
    *,
    executor: Executor | None = None,
    command: str = "",
    resume: bool = False,
    on_start: OnStart | None = None,
    on_result: OnResult | None = None,
    on_open: Callable[[str, bool, int], None] | None = None,
    make_task: MakeTask | None = None,
    on_disturbed: str = "retry",
    on_retry: OnRetry | None = None,
    reuse_artifacts: bool = True,
    keep_artifacts: Path | None = None,
) -> RunResult:
    """Run `spec` into `store`; raises KeyboardInterrupt after storing an interrupted one.

    A spec not yet prepared is prepared here, before anything is written; a command
    prepares it before it opens the store, so bad user code leaves no file behind.

    `on_open(run_id, resumed, repetitions already stored)` is called before any work.
    `make_task` builds each repetition's task (default: an inference RepetitionTask); a
    TrainSpec passes one that builds TrainTasks, and Plan only needs the spec's cells().
    `on_disturbed` (retry, keep, fail) says what a disturbed repetition leads to; with
    fail, the run stops after storing it and the result's `stopped` says why.
    `reuse_artifacts`: a cell's repetitions share its exported and compiled artifacts
    (backends/artifacts.py); False makes every repetition export and compile its own.
    `keep_artifacts`: the directory they are filed in and kept (default: the run's
    scratch, removed when it ends).
    """
    runner = Runner(
        spec if isinstance(spec, Prepared) else prepare(spec),
        store,
        executor or LocalExecutor(),
        on_start,
        on_result,
        make_task,
        on_disturbed=on_disturbed,
        on_retry=on_retry,
        reuse_artifacts=reuse_artifacts,
        keep_artifacts=keep_artifacts,
    )
    run_id, resumed = runner.open(command, resume)
    if on_open:
        on_open(run_id, resumed, runner.done)
    completed = runner.run(run_id)
    result = RunResult.from_store(store, run_id)
    result.stopped = runner.stopped
    if not completed:
        raise KeyboardInterrupt
    return result

"""The bursts design is honest, shown on synthetic workers (issue 40).

A synthetic worker stands in for the paced worker process (execute/paced.py): its step
time is a model, not a measurement, so each test knows the truth it plants.
- a +5% slowdown on one side, under modes and 1% noise, is found and sized;
- a slow mode shared by both sides (the machine's, lasting many burst pairs) does not
  move the A/A estimate, because both bursts of a pair see it and it cancels;
- a bias of whichever worker starts first lands on the side drawn first in each block,
  and the draw spreads it over both sides: the A/A is not called a regression;
- a slow core is shared by both workers of a block pinned to it, and is the pair's bias
  only when each worker keeps a core of its own.

Everything else is the real `stackcost ab`: the CLI, the runners, the store, the
sequential verdict. Only the worker process is replaced.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from types import SimpleNamespace

import pytest

from stackcost.cli import main
from stackcost.commands.ab import EXIT_UNDECIDED
from stackcost.execute import interleave
from stackcost.measure.stats import summarize
from stackcost.result import RepetitionResult

STEP_NS = 1_000_000
# The machine's slow mode: every other stretch of this many simulated steps is 1.5x
# slower. A burst pair spans tens of steps, a block thousands: the mode lasts "seconds".
MODE_STEPS = 400
MODE_SLOWDOWN = 1.5


class Machine:
    """The simulated machine both workers share: its clock (in steps run), its modes, and
    its cores' own speeds (a core's slowdown: a busy neighbour on the host)."""

    def __init__(
        self, slot_bias: float = 0.0, seed: int = 1, core_slowdown: dict[int, float] | None = None
    ) -> None:
        self.steps = 0
        self.started = 0  # workers started so far: even = first of its block
        self.slot_bias = slot_bias
        self.core_slowdown = core_slowdown or {}
        self.rng = random.Random(seed)

    def mode(self) -> float:
        return MODE_SLOWDOWN if (self.steps // MODE_STEPS) % 2 else 1.0


class SyntheticWorker:
    """PacedWorker's interface over a modelled step: factor (the side's planted change,
    from its environment) x slot bias (when it started first) x its core's slowdown x the
    machine's mode x noise. Unpinned, a worker stays on the core the kernel woke it on:
    the block's first on core 0, its second on core 1."""

    machine: Machine

    def __init__(self, python: str, env: dict[str, str], task) -> None:
        m = self.machine
        self.first = m.started % 2 == 0  # the block's workers start one after the other
        m.started += 1
        self.task = task
        self.core = 0 if self.first else 1
        self.factor = float(env.get("SYNTHETIC_FACTOR", "1")) * (
            1 + m.slot_bias if self.first else 1.0
        )
        self.samples: list[int] = []
        self.proc = SimpleNamespace(poll=lambda: None)

    def ready(self, timeout_s: float = 0) -> float:
        return STEP_NS * self.factor

    def pin(self, cpus: frozenset[int]) -> None:
        self.core = min(cpus)

    def burst(self, steps: int, timeout_s: float = 0) -> dict:
        m = self.machine
        ns = []
        on_core = 1 + m.core_slowdown.get(self.core, 0.0)
        for _ in range(steps):
            noise = m.rng.lognormvariate(0, 0.01)
            ns.append(round(STEP_NS * self.factor * on_core * m.mode() * noise))
            m.steps += 1
        self.samples += ns
        return {"ns": ns, "disturbed": False, "others_cores": 0.0}

    def finish(self, timeout_s: float = 0) -> RepetitionResult:
        return RepetitionResult(
            status="ok",
            repetition=self.task.repetition,
            stop_reason="paced",
            stats=summarize(self.samples),
            details={"synthetic": {"first": self.first, "factor": self.factor}},
        )

    def kill(self) -> None:
        pass


def run_ab(
    tmp_path, monkeypatch, machine: Machine, blocks: int, *extra: str, worker=SyntheticWorker
) -> dict:
    monkeypatch.setattr(SyntheticWorker, "machine", machine, raising=False)
    monkeypatch.setattr(interleave, "PacedWorker", worker)
    tmp_path.mkdir(parents=True, exist_ok=True)
    js = tmp_path / "ab.json"
    argv = ["ab", "mlp", "--backends", "eager", "--batch-size", "2", "--resolution", "4"]
    argv += ["--db", str(tmp_path / "ab.db"), "--json", str(js), "--quiet"]
    argv += ["--min-blocks", str(blocks), "--max-blocks", str(blocks), "--block-time", "0.02"]
    threads = [] if "--threads" in extra else ["--threads", "1"]
    code = main([*argv, *threads, *extra])
    verdict = json.loads(js.read_text())
    verdict["code"] = code
    return verdict


def test_a_planted_five_percent_on_one_side_is_found(tmp_path, monkeypatch):
    verdict = run_ab(tmp_path, monkeypatch, Machine(), 6, "--cand-env", "SYNTHETIC_FACTOR=1.05")
    (cell,) = verdict["cells"]
    assert cell["design"] == "bursts"
    assert cell["verdict"] == "regressed" and verdict["code"] == 1
    assert cell["result"]["ratio"] == pytest.approx(1.05, abs=0.01)


def test_a_slow_mode_shared_by_both_sides_does_not_move_the_estimate(tmp_path, monkeypatch):
    machine = Machine()
    verdict = run_ab(tmp_path, monkeypatch, machine, 6)
    (cell,) = verdict["cells"]
    assert machine.steps > 4 * MODE_STEPS  # the blocks crossed the modes many times
    # Each side's burst means swing by the mode's 50%, its pairs' ratios do not.
    values = [v for b in cell["blocks"] for v in b["base"]]
    assert max(values) / min(values) > 1.3
    assert cell["verdict"] == "unchanged" and verdict["code"] == 0
    assert cell["result"]["ratio"] == pytest.approx(1.0, abs=0.01)


def test_a_slot_bias_of_the_first_started_worker_is_spread_by_the_draw(tmp_path, monkeypatch):
    bias = 0.10
    # A block time of ~0: each block is exactly MIN_PAIRS pairs, so the seeded draws do not
    # depend on how many pairs a loaded lane fits in a block's wall time (CI's did not).
    verdict = run_ab(tmp_path, monkeypatch, Machine(slot_bias=bias), 12, "--block-time", "1e-9")
    (cell,) = verdict["cells"]
    firsts = [b["first"] for b in cell["blocks"]]
    assert set(firsts) == {"base", "cand"}  # the draw put each side first in some blocks
    by_first = {
        side: [b["log_ratio"] for b in cell["blocks"] if b["first"] == side]
        for side in ("base", "cand")
    }
    # The bias lands on whichever side started first: cand looks faster when base did.
    assert statistics.fmean(by_first["base"]) == pytest.approx(-math.log(1 + bias), abs=0.01)
    assert statistics.fmean(by_first["cand"]) == pytest.approx(math.log(1 + bias), abs=0.01)
    # Spread over both sides, it widens the interval instead of faking a change.
    assert cell["verdict"] in ("unchanged", "noisy")
    assert verdict["code"] in (0, EXIT_UNDECIDED)


class SteadyMachine(Machine):
    """A machine without slow modes: only its cores differ."""

    def mode(self) -> float:
        return 1.0


@pytest.mark.parametrize("same", [True, False])
def test_a_slow_core_is_the_pairs_bias_only_when_each_worker_keeps_its_own(
    tmp_path, monkeypatch, same
):
    slow = 0.10  # core 1 runs 10% slower: a busy neighbour on the host
    monkeypatch.setattr(interleave, "host_cpus", lambda: [0, 1])  # a 2-core host in any lane
    flag = "--same-cores" if same else "--no-same-cores"
    machine = SteadyMachine(core_slowdown={1: slow})  # its cores' speeds, and noise
    verdict = run_ab(tmp_path, monkeypatch, machine, 12, flag, "--block-time", "1e-9")
    (cell,) = verdict["cells"]
    assert verdict["design"]["same_cores"] is same
    cores = [b["cores"] for b in cell["blocks"]]
    logs = [b["log_ratio"] for b in cell["blocks"]]
    if same:
        assert sorted({tuple(c) for c in cores}) == [(0,), (1,)]  # drawn per block
        # Both bursts of a pair ran on the slow core, or neither did: it cancels.
        assert all(abs(x) < 0.01 for x in logs)
        assert cell["verdict"] == "unchanged"
    else:
        assert cores == [None] * 12
        # Each pair compared core 0 with core 1: every block carries the core's 10%,
        # signed by which side's worker started first (and so kept core 0).
        assert all(abs(abs(x) - math.log(1 + slow)) < 0.01 for x in logs)
        assert cell["verdict"] != "unchanged"


@pytest.mark.whole_machine  # a 2-thread cell
def test_a_cell_whose_threads_openmp_binds_keeps_that_binding(tmp_path, monkeypatch):
    from stackcost.env import cores

    if cores() < 2:
        pytest.skip("needs 2 CPUs for a 2-thread cell")
    monkeypatch.setattr(interleave, "host_cpus", lambda: [0, 1, 2, 3])  # wider than the cell
    for flag, pinned in (("--bind-threads", False), ("--no-bind-threads", True)):
        extra = ("--threads", "2", flag)
        verdict = run_ab(tmp_path / flag, monkeypatch, Machine(), 2, *extra)
        (cell,) = verdict["cells"]
        drawn = [b["cores"] for b in cell["blocks"]]
        assert all(len(c) == 2 for c in drawn) if pinned else drawn == [None, None]


@pytest.mark.whole_machine  # pins workers to one of 2 cores
def test_real_workers_of_a_narrower_cell_run_on_the_blocks_drawn_core(tmp_path):
    import sqlite3

    from stackcost.env import cores

    if cores() < 2:
        pytest.skip("needs 2 CPUs to draw one of them")
    js = tmp_path / "ab.json"
    argv = ["ab", "mlp", "--backends", "eager", "--batch-size", "2", "--resolution", "4"]
    argv += ["--threads", "1", "--min-blocks", "2", "--max-blocks", "2", "--block-time", "0.05"]
    main([*argv, "--quiet", "--db", str(tmp_path / "ab.db"), "--json", str(js)])
    (cell,) = json.loads(js.read_text())["cells"]
    drawn = [b["cores"] for b in cell["blocks"]]
    assert len(drawn) == 2 and all(len(c) == 1 for c in drawn)
    db = sqlite3.connect(tmp_path / "ab.db")
    rows = db.execute("SELECT result_json FROM repetitions ORDER BY rowid").fetchall()
    timed = [json.loads(r)["details"]["main_thread_cpus"]["timed"] for (r,) in rows]
    assert timed == [drawn[0], drawn[0], drawn[1], drawn[1]]  # both workers of each block


def test_bursts_are_sized_once_both_workers_are_warm(tmp_path, monkeypatch):
    class SlowToReady(SyntheticWorker):
        def ready(self, timeout_s: float = 0) -> float:
            return 3 * STEP_NS * self.factor  # timed while the other worker still compiled

    verdict = run_ab(tmp_path, monkeypatch, Machine(), 2, worker=SlowToReady)
    (cell,) = verdict["cells"]
    # 20 ms bursts of 1 ms steps (1.5 ms in the slow mode), not of the 3 ms it reported.
    assert [b["burst_steps"] for b in cell["blocks"]] and all(
        b["burst_steps"] in (13, 20) for b in cell["blocks"]
    )
    assert all(b["ready_ms"] == {"base": 3.0, "cand": 3.0} for b in cell["blocks"])


@pytest.mark.parametrize(
    ("backend", "threads", "bound"),
    [("eager", 2, True), ("inductor", 2, True), ("eager", 1, False), ("onnxruntime", 2, False)],
)
def test_bursts_bind_torchs_openmp_threads_where_its_pool_runs_the_step(backend, threads, bound):
    from stackcost.scenarios.task import OMP_BINDING, RepetitionTask
    from tests.conftest import tiny_cell

    task = RepetitionTask(cell=tiny_cell(backend, threads=threads), workdir="w")
    assert "OMP_PROC_BIND" not in task.thread_env()  # `run` never binds
    env = task.model_copy(update={"bind_threads": True}).thread_env()
    # ONNX Runtime's own pool would inherit the one core libgomp binds the main thread to.
    assert (env.items() >= OMP_BINDING.items()) == bound


@pytest.mark.whole_machine  # a 2-thread cell
def test_ab_binds_both_sides_workers_unless_told_not_to(tmp_path, monkeypatch):
    from stackcost.env import cores

    if cores() < 2:
        pytest.skip("needs 2 CPUs for a 2-thread cell")
    seen: list[dict[str, str]] = []

    class Recording(SyntheticWorker):
        def __init__(self, python: str, env: dict[str, str], task) -> None:
            super().__init__(python, env, task)
            seen.append(env)

    for flag, bound in (("--bind-threads", True), ("--no-bind-threads", False)):
        seen.clear()
        extra = ("--threads", "2", flag)
        verdict = run_ab(tmp_path / flag, monkeypatch, Machine(), 2, *extra, worker=Recording)
        assert verdict["design"]["bind_threads"] is bound
        assert len(seen) == 4 and all(("OMP_PROC_BIND" in env) == bound for env in seen)


# A synthetic generation: prefill, then decode steps, each in "steps" of the machine's clock.
PREFILL_NS, DECODE_NS, NEW_TOKENS = 30_000_000, 5_000_000, 8


class SyntheticGenerator(SyntheticWorker):
    """A generate cell's paced worker: each burst unit is a whole generation whose prefill
    carries the side's planted SYNTHETIC_PREFILL factor and whose decode steps do not."""

    def __init__(self, python: str, env: dict[str, str], task) -> None:
        super().__init__(python, env, task)
        self.prefill = float(env.get("SYNTHETIC_PREFILL", "1"))
        self.asked: list[int] = []

    def burst(self, steps: int, timeout_s: float = 0) -> dict:
        m = self.machine
        self.asked.append(steps)
        reply: dict = {"ns": [], "ttft_ns": [], "tpot_ns": [], "disturbed": False}
        for _ in range(steps):
            noise = m.rng.lognormvariate(0, 0.01)
            ttft = round(PREFILL_NS * self.prefill * self.factor * m.mode() * noise)
            decode = [round(DECODE_NS * self.factor * m.mode() * noise)] * (NEW_TOKENS - 1)
            m.steps += NEW_TOKENS * 5  # a generation is long: the modes turn every 10
            reply["ns"].append(ttft + sum(decode))
            reply["ttft_ns"].append(ttft)
            reply["tpot_ns"] += decode
        self.samples += reply["ns"]
        return reply


def test_a_generation_alternates_whole_generations_and_judges_ttft_and_tpot_apart(
    tmp_path, monkeypatch
):
    started: list[SyntheticGenerator] = []

    class Recording(SyntheticGenerator):
        def __init__(self, python: str, env: dict[str, str], task) -> None:
            super().__init__(python, env, task)
            started.append(self)

    machine = Machine()
    monkeypatch.setattr(SyntheticWorker, "machine", machine, raising=False)
    monkeypatch.setattr(interleave, "PacedWorker", Recording)
    js = tmp_path / "ab.json"
    argv = ["ab", "llama-tiny", "--scenario", "generate", "--prompt-len", "8", "--new-tokens"]
    argv += [str(NEW_TOKENS), "--backends", "eager", "--batch-size", "1", "--threads", "1"]
    argv += ["--cand-env", "SYNTHETIC_PREFILL=1.1", "--min-blocks", "6", "--max-blocks", "6"]
    argv += ["--block-time", "1e-9", "--db", str(tmp_path / "ab.db"), "--json", str(js)]
    code = main([*argv, "--quiet"])
    verdict = json.loads(js.read_text())
    cells = {c["metric"]: c for c in verdict["cells"]}
    assert code == 1 and set(cells) == {"ttft", "tpot"}
    assert cells["ttft"]["verdict"] == "regressed" and cells["ttft"]["design"] == "bursts"
    assert cells["ttft"]["result"]["ratio"] == pytest.approx(1.1, abs=0.01)
    assert cells["tpot"]["verdict"] == "unchanged" and cells["tpot"]["design"] == "bursts"
    assert cells["tpot"]["result"]["ratio"] == pytest.approx(1.0, abs=0.01)
    assert machine.steps > 4 * MODE_STEPS  # the modes turned under the blocks
    # One alternation feeds both metrics: two workers a block, not four.
    assert len(started) == 2 * verdict["blocks"] == 12
    for w in started:
        # One generation to size, then bursts of one whole generation (65 ms > 20 ms).
        assert w.asked[0] == 1 and set(w.asked[1:]) == {1}
    for c in cells.values():
        assert all(b["burst_steps"] == 1 for b in c["blocks"])
        # A block-time of ~0: each block is the generate cell's fewest pairs, not MIN_PAIRS.
        least = interleave.burst_shape("generate").min_pairs
        assert least > interleave.MIN_PAIRS
        assert [len(b["base"]) for b in c["blocks"]] == [least] * 6


def test_a_burst_without_a_decode_step_gives_tpot_no_value():
    base = {"ns": [3e6], "ttft_ns": [3e6], "tpot_ns": []}
    cand = {"ns": [4e6], "ttft_ns": [4e6], "tpot_ns": []}
    full = {"ns": [9e6], "ttft_ns": [3e6], "tpot_ns": [2e6, 1e6, 4e6]}
    alt = interleave.Alternation(("base", "cand"), [{"base": base, "cand": cand}], 0)
    assert alt.values("ttft") == {"base": [3.0], "cand": [4.0]}
    assert alt.values("tpot") == {"base": [], "cand": []}  # a new token of one: no pair
    assert interleave.burst_value_ms(full, "tpot") == 2.0  # the decode steps' median
    assert interleave.burst_value_ms(full, "latency") == 9.0


# -- replan: the rest of an undecided cell's blocks shaped by where its time varied ------


def _pair(blocks: list[tuple[list[float], list[float]]]) -> interleave.CellPair:
    from tests.conftest import tiny_cell

    cell = tiny_cell()
    return interleave.CellPair(cell, cell, blocks=blocks, design="bursts")


def test_replan_gives_a_cell_whose_processes_differ_cheaper_blocks_and_more_of_them():
    # Each block's candidate worker sits at its own level against its base (+-15%), its
    # bursts steady: a bias of the process pair, which its burst pairs cannot cancel.
    levels = [1.0, 1.3, 0.9, 1.2, 1.05, 0.85]
    pair = _pair([([1.0, 1.001, 0.999], [x, x * 1.002, x]) for x in levels])
    design = interleave.Design(max_blocks=20, block_s=2.0)
    interleave.replan([pair], design)
    assert pair.cap == 30 and pair.block_s == 1.0
    assert "where their burst pairs explain" in pair.plan_note and pair.plan_note in pair.note()


def test_replan_gives_a_cell_whose_bursts_vary_longer_blocks_and_the_same_cap():
    rng = random.Random(3)
    noisy = [([rng.uniform(0.7, 1.3) for _ in range(8)], [rng.uniform(0.7, 1.3) for _ in range(8)])]
    pair = _pair(noisy * 6)  # the same bursts in every block: nothing between processes
    interleave.replan([pair], interleave.Design(max_blocks=20, block_s=2.0))
    assert (
        pair.cap == 20 and pair.block_s == 4.0 and "as their burst pairs explain" in pair.plan_note
    )


def test_replan_leaves_processes_cells_and_a_design_without_it_alone():
    pair = _pair([([1.0, 1.0], [1.0, 1.0]), ([1.5, 1.5], [1.5, 1.5])])
    interleave.replan([pair], interleave.Design(replan=False))
    assert pair.cap is None and pair.block_s is None and not pair.plan_note
    pair.design = "processes"
    interleave.replan([pair], interleave.Design())
    assert pair.cap is None


class BiasedWorker(SyntheticWorker):
    """A synthetic worker whose candidate side carries its process's own speed, steady
    within it: 1.4x in one block's process, 0.7x in the next (SYNTHETIC_BIAS)."""

    def __init__(self, python: str, env: dict[str, str], task) -> None:
        super().__init__(python, env, task)
        if env.get("SYNTHETIC_BIAS"):
            block = (self.machine.started - 1) // 2  # two workers a block
            self.factor *= 1.4 if block % 2 else 0.7


def test_an_undecided_cell_with_biased_processes_runs_past_the_designs_cap(tmp_path, monkeypatch):
    argv = ["--min-blocks", "4", "--max-blocks", "6", "--cand-env", "SYNTHETIC_BIAS=1"]
    verdict = run_ab(tmp_path, monkeypatch, Machine(), 6, *argv, worker=BiasedWorker)
    (cell,) = verdict["cells"]
    assert cell["plan"]["cap"] == 9, cell["plan"]
    assert "where their burst pairs explain" in cell["plan"]["why"]
    assert cell["verdict"] == "noisy" and len(cell["blocks"]) == 9
    assert verdict["design"]["replan"] is True


class EnvWorker(SyntheticWorker):
    """A synthetic worker that keeps the environment it was started with."""

    envs: list[dict[str, str]] = []

    def __init__(self, python: str, env: dict[str, str], task) -> None:
        super().__init__(python, env, task)
        self.envs.append(env)


@pytest.mark.parametrize("asked, allocator", [([], "steady"), (["--allocator", "glibc"], "glibc")])
def test_ab_runs_both_sides_on_the_gates_allocator_unless_told(
    tmp_path, monkeypatch, asked, allocator
):
    monkeypatch.setattr(EnvWorker, "envs", [])
    verdict = run_ab(tmp_path, monkeypatch, Machine(), 2, *asked, worker=EnvWorker)
    assert verdict["design"]["allocator"] == allocator
    from stackcost.allocators import ALLOCATORS

    wanted = ALLOCATORS[allocator].env
    assert EnvWorker.envs and all(
        {k: env.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
        == {k: wanted.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
        for env in EnvWorker.envs
    )

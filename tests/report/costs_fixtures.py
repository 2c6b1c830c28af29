"""A small real store of `--profile` runs for the "where the time goes" section.

One run: model mlp, backends eager and onnxruntime, batch 1 and 4, threads 1 and 2, with
hand-made breakdowns, work, telemetry, energy and the run's measured peaks; plus a
libtorch cell without a breakdown, a busy-machine cell, a "wrong" cell that carries a
breakdown (it must never be drawn) and a valid cell of a hostile model whose top
operator's name is hostile too. Everything goes through Store and RunResult.from_store.

Every timing is exact (all samples equal) so speedups and % of peak can be checked.
"""

from __future__ import annotations

from stackcost.cell import Cell
from stackcost.measure.energy import Energy
from stackcost.measure.flops import Work
from stackcost.measure.stats import summarize
from stackcost.measure.telemetry import RaplStatus, Telemetry
from stackcost.profile.breakdown import Breakdown, OpRow
from stackcost.result import RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from stackcost.verify import Verification

EVIL_MODEL = "<script>alert(11)</script>"
EVIL_OP = "<img src=x onerror=alert(12)>"
PEAKS = {  # threads -> (fp32 GFLOP/s, stream GB/s)
    1: (150.0, 14.6),
    2: (318.0, 15.9),
}
FLOPS_PER_SAMPLE = 300_000_000
BYTES_PER_SAMPLE = 50_000_000
# median ms per batch: (backend, batch, threads)
MEDIAN_MS = {
    ("eager", 1, 1): 12.0,
    ("eager", 1, 2): 7.5,  # speedup 1.6
    ("eager", 4, 1): 24.0,
    ("eager", 4, 2): 16.0,  # speedup 1.5
    ("onnxruntime", 1, 1): 4.0,
    ("onnxruntime", 1, 2): 2.5,  # speedup 1.6
    ("onnxruntime", 4, 1): 15.0,
    ("onnxruntime", 4, 2): 10.0,  # speedup 1.5
}
BUSY_CELL = ("onnxruntime", 4, 2)
# onnxruntime: measured energy (RAPL) except for one estimated cell.
ESTIMATED_ORT = ("onnxruntime", 1, 2)
WATTS_PER_THROUGHPUT = 0.02  # estimated power grows with throughput: a known line
BASE_WATTS = 2.0
RAPL_SOURCE = "RAPL package-0 (whole package)"
ESTIMATE_SOURCE = (
    "estimate: P = P_idle + (P_max - P_idle) x utilisation; P_max = 5 W per busy core "
    "assumed, P_idle = 1 W per core assumed; {busy:.2f} busy cores of 2 (target's CPU time "
    "from the sampler)"
)


def power(backend: str, batch: int, threads: int) -> float:
    """The cell's watts: a line in throughput for eager, a curve with noise for ORT."""
    tput = batch / (MEDIAN_MS[(backend, batch, threads)] / 1e3)
    if backend == "eager":
        return BASE_WATTS + WATTS_PER_THROUGHPUT * tput
    return BASE_WATTS + 0.01 * tput + 0.5 * threads


def _telemetry(threads: int, busy: bool) -> Telemetry:
    others = 0.9 if busy else 0.05
    return Telemetry(
        interval_s=0.01,
        n_samples=50,
        gap_max_s=0.25 if threads == 2 else 0.011,  # SCHED_IDLE: late when cores are full
        sched="idle",
        window_s=0.5,
        covered_s=0.5,
        logical_cpus=2,
        threads=threads,
        cpu_util_cores_mean=0.95 * threads,
        cpu_util_cores_max=threads,
        cpu_util_percent_of_threads=95.0,
        cpu_util_percent_basis="of the cell's threads",
        rss_peak_bytes=300 * 2**20,
        system_busy_cores_mean=0.95 * threads + others,
        sampler_cores_mean=0.01,
        other_busy_cores_mean=others,
        loadavg_1m=1.0,
        busy_machine=busy,
        rapl=RaplStatus(available=False, reason="no /sys/class/powercap"),
    )


def _energy(backend: str, batch: int, threads: int, method: str) -> Energy:
    watts = power(backend, batch, threads)
    seconds = 0.5
    samples = round(batch / (MEDIAN_MS[(backend, batch, threads)] / 1e3) * seconds)
    joules = watts * seconds
    return Energy(
        method=method,
        source=RAPL_SOURCE if method == "measured" else ESTIMATE_SOURCE.format(busy=threads),
        joules=joules,
        seconds=seconds,
        watts=watts,
        samples=samples,
        joules_per_sample=joules / samples,
        samples_per_joule=samples / joules,
        device="cpu",
    )


def _breakdown(median_ms: float, backend: str, op: str | None = None) -> Breakdown:
    wall = median_ms * 1.1  # the profiler's cost
    kernels = 0.8 * wall
    overhead = 0.18 * wall
    first = op or ("aten::mkldnn_convolution" if backend == "eager" else "Conv")
    ops = [first, "aten::addmm" if backend == "eager" else "Gemm", "Relu", "MaxPool"]
    shares = [0.6, 0.12, 0.05, 0.02]
    return Breakdown(
        method="torch.profiler, CPU activities" if backend == "eager" else "onnxruntime profiler",
        iters=10,
        wall_ms=wall,
        parts_ms={"kernels": kernels, "overhead": overhead},
        top_ops=[
            OpRow(name=n, calls=10 * (i + 1), self_ms=s * wall * 10, share=s)
            for i, (n, s) in enumerate(zip(ops, shares, strict=True))
        ],
        notes=[f"{backend} note"],
        unprofiled_wall_ms=median_ms,
    )


def _rep(
    cell: Cell,
    median_ms: float,
    *,
    status: str = "ok",
    breakdown: Breakdown | None = None,
    energy: Energy | None = None,
    telemetry: Telemetry | None = None,
    notes: list[str] | None = None,
) -> RepetitionResult:
    samples = [int(median_ms * 1e6)] * 20
    flops = FLOPS_PER_SAMPLE * cell.batch_size
    return RepetitionResult(
        status=status,
        stats=summarize(samples),
        samples_ns=samples,
        throughput=cell.batch_size / (median_ms / 1e3),
        cold_start_ms=median_ms * 2,
        verification=Verification(max_abs_err=0.0, max_rel_err=0.0, tolerance=1e-4, ok=True),
        breakdown=breakdown,
        work=Work(
            flops=flops,
            bytes=BYTES_PER_SAMPLE * cell.batch_size,
            by_op={"convolution": flops},
            method="test",
            bytes_method="ESTIMATED (test)",
            mode="infer",
        ),
        achieved_gflops=flops / (median_ms / 1e3) / 1e9,
        telemetry=telemetry,
        energy=energy,
        profile_notes=notes or [],
    )


def peaks_env() -> dict:
    return {
        str(t): {
            "threads": t,
            "fp32_gflops": fp32,
            "bf16_gflops": None,
            "bf16_note": "CPU lacks avx512_bf16/amx_bf16",
            "stream_gbs": bw,
            "gemm_method": "test",
            "stream_method": "test",
            "measured_at": "2026-01-01T00:00:00+00:00",
            "seconds": 1.0,
        }
        for t, (fp32, bw) in PEAKS.items()
    }


def build_profiled_store(path) -> tuple[Store, str]:
    store = Store(path)
    spec = {"models": ["mlp"], "threads": [1, 2], "profile": True}
    env = {"cpu": {"model": "Test CPU", "logical_cores": 2}, "peaks": peaks_env()}
    run_id = store.create_run(spec, env, "stackcost run --profile test")
    mlp = model_ref("mlp")
    for (backend, batch, threads), ms in MEDIAN_MS.items():
        cell = Cell(model=mlp, backend=backend, batch_size=batch, resolution=32, threads=threads)
        method = "measured" if backend == "onnxruntime" else "estimated"
        if (backend, batch, threads) == ESTIMATED_ORT:
            method = "estimated"
        store.add_repetition(
            store.add_cell(run_id, cell),
            _rep(
                cell,
                ms,
                breakdown=_breakdown(ms, backend),
                energy=_energy(backend, batch, threads, method),
                telemetry=_telemetry(threads, (backend, batch, threads) == BUSY_CELL),
            ),
        )
    # No breakdown: the reason must be listed under the figure.
    libtorch = Cell(model=mlp, backend="libtorch", batch_size=1, resolution=32, threads=1)
    store.add_repetition(
        store.add_cell(run_id, libtorch),
        _rep(libtorch, 9.0, notes=["libtorch: no breakdown (the C++ program has no timers)"]),
    )
    # A "wrong" cell with a full profile: none of it may be drawn.
    wrong = Cell(model=mlp, backend="openvino", batch_size=1, resolution=32, threads=1)
    store.add_repetition(
        store.add_cell(run_id, wrong),
        _rep(
            wrong,
            777.0,
            status="wrong",
            breakdown=_breakdown(777.0, "openvino", op="WRONG_CELL_OP"),
            telemetry=_telemetry(1, False),
            energy=_energy("eager", 1, 1, "estimated"),
        ),
    )
    # A hostile model and a hostile operator name.
    evil = Cell(
        model=mlp.model_copy(update={"name": EVIL_MODEL}),
        backend="eager",
        batch_size=1,
        resolution=32,
        threads=1,
    )
    store.add_repetition(
        store.add_cell(run_id, evil),
        _rep(evil, 12.0, breakdown=_breakdown(12.0, "eager", op=EVIL_OP)),
    )
    store.finish_run(run_id)
    return store, run_id


def profiled_runs(path) -> list[RunResult]:
    store, run_id = build_profiled_store(path)
    with store:
        return [RunResult.from_store(store, run_id)]

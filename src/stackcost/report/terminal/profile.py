"""The terminal table `--profile` adds: where each cell's time goes, how close it gets to
the machine's measured peak, how busy it kept the CPU and what its energy was."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from stackcost.measure.copies import HostCopies
from stackcost.report.fit import FitTable
from stackcost.report.frames.costs import profiled
from stackcost.report.terminal.run import size_axes, size_heading, size_value
from stackcost.result import RepetitionResult
from stackcost.store.runs import CellResult, RunResult

# What a narrow terminal hides first (report/fit.py): the split and the peak's share stay.
DROP = ("energy method", "J/sample", "power", "CPU util", "thr", "top op")


def percent_of_peak(rep: RepetitionResult, c: CellResult, env: dict) -> float | None:
    """Achieved FLOP/s as a share of the peak measured for the cell: a CPU cell's at its
    thread count, a cuda cell's its GPU's matmul peak at the cell's precision."""
    from stackcost.measure.peaks import cell_peaks, percent_of_peak

    peaks = cell_peaks(env.get("peaks"), c.cell.device, c.cell.threads)
    if rep.achieved_gflops is None or peaks is None:
        return None
    return percent_of_peak(rep.achieved_gflops, peaks, c.cell.precision)


def _split(rep: RepetitionResult) -> tuple[str, str]:
    """The parts as shares of the profiled wall (remainder included), and the top op."""
    b = rep.breakdown
    if b is None:
        return "—", "—"
    parts = [f"{k} {v / b.wall_ms:.0%}" for k, v in b.parts_ms.items()]
    parts.append(f"rest {b.remainder_ms / b.wall_ms:+.1%}")
    top = b.top_ops[0] if b.top_ops else None
    return f"{b.wall_ms:.3g} ms\n" + "\n".join(
        parts
    ), f"{top.name}\n{top.share:.0%}" if top else "—"


def copies_line(h: HostCopies) -> str:
    """One batch's host -> device copy, pageable against pinned, in words."""
    return (
        f"host->device copy of the batch, {h.bytes / 1e6:.3g} MB: pageable {h.pageable_ms:.3g} ms "
        f"({h.pageable_gbs:.3g} GB/s), pinned {h.pinned_ms:.3g} ms ({h.pinned_gbs:.3g} GB/s); "
        f"median of {h.iters} CUDA-event-timed copies"
    )


def profile_table(result: RunResult) -> Table | None:
    rows = [(c, rep) for c in result.cells() if (rep := profiled(c)) is not None]
    if not rows:
        return None
    table = FitTable(
        title="where the time goes (--profile)",
        header_style="bold",
        drop=DROP,
        hint=f" or read `stackcost report {result.run_id}`",
    )
    notes: list[str] = []
    sizes = size_axes(c.cell for c, _ in rows)  # "resolution (px)", "seq len (tokens)"
    for name in (
        "batch",
        *(size_heading(a) for a in sizes),
        "thr",
        "backend",
        "profiled step",
        "top op",
        "GFLOP/s",
        "% peak",
        "CPU util",
        "power",
        "J/sample",
        "energy method",
    ):
        table.add_column(
            name, justify="left" if name in ("backend", "profiled step", "top op") else "right"
        )
    for c, rep in rows:
        split, top = _split(rep)
        notes += [f"{c.cell.backend} b{c.cell.batch_size}: {n}" for n in rep.profile_notes]
        if rep.host_copies is not None:
            notes.append(f"{c.cell.backend} b{c.cell.batch_size}: {copies_line(rep.host_copies)}")
        peak = percent_of_peak(rep, c, result.env)
        tel, energy = rep.telemetry, rep.energy
        util = Text("—")
        if tel is not None:
            util = Text(f"{tel.cpu_util_cores_mean:.2f} cores")
            if tel.busy_machine:
                util.append(f"\nbusy: others {tel.other_busy_cores_mean:.2f}", style="red")
        # Operator names ("[memory]"), methods and notes are Text: never read as markup.
        table.add_row(
            str(c.cell.batch_size),
            *(size_value(c.cell, a) for a in sizes),
            str(c.cell.threads),
            Text(c.cell.backend),
            Text(split),
            Text(top),
            f"{rep.achieved_gflops:.1f}" if rep.achieved_gflops is not None else "—",
            f"{peak:.1f}%" if peak is not None else "—",
            util,
            f"{energy.watts:.1f} W" if energy else "—",
            f"{energy.joules_per_sample:.3g}" if energy else "—",
            Text(energy.method if energy else "—"),
        )
    # One line per method and model: the per-cell part of a source (its busy cores) is in the
    # stored result and the report.
    notes += sorted(
        {
            f"energy, {r.energy.method}: {r.energy.source.rsplit('; ', 1)[0]}"
            for _, r in rows
            if r.energy
        }
    )
    caption = (
        "breakdown from a separate profiled pass (torch.profiler or ONNX Runtime's profiler): "
        "kernels vs overhead (wall not covered by kernels), remainder = wall − parts; "
        "GFLOP/s = FlopCounterMode FLOPs / median step; % peak of this machine's measured "
        "GEMM peak at the same threads (a cuda cell: its GPU's matmul peak at its precision, "
        "`stackcost peaks --device cuda`); CPU util in cores over the timed loop (side-channel "
        "sampler under SCHED_IDLE, so it never takes a core from the cell; the means come from "
        "the cell's own CPU counters at the loop's edges); energy 'estimated' = a stated "
        "power model, 'measured' = RAPL/NVML counters"
    )
    if notes:
        caption += "\n" + "\n".join(notes)
    table.caption = Text(caption)
    return table

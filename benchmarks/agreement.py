"""Does stackcost agree with the tools people already trust, side by side in warm workers?

Three peers, each against the stackcost backend that runs the same thing:

- torch.utils.benchmark.Timer.blocked_autorange on the eager backend's step
  vs `stackcost run --backends eager`;
- a bare ONNX Runtime loop (a default InferenceSession with intra_op_num_threads set,
  each run() timed by time.perf_counter) vs `--backends onnxruntime`;
- OpenVINO's benchmark_app (sync API, 1 stream, -nthreads T, f32) vs `--backends openvino`.

resnet18, fp32, built from stackcost's seeded config (same weights, same inputs), at each
batch size and --resolution, T threads everywhere. The ONNX graph the two peers load is
exported once up front by stackcost's own exporter; stackcost's runs export their own
(each run has its artifact cache).

Two designs (--design). `bursts`, the default (issue 40): in each block each (peer, batch)
gets a fresh pair of warm workers, stackcost's paced worker and the peer's, alternating
bursts of tens of milliseconds, so the machine's modes of seconds cancel in each pair's
ratio and the per-process bias averages over blocks (_agreement_bursts.py). The verdict is
the geometric mean of the block ratios, with its 95% interval over blocks: PASS within 3%.
OpenVINO's peer there is benchmark_app's sync loop run in the peer's process with the
properties benchmark_app sets (benchmark_app cannot be paced). `processes`, the design
before it:

Both sides of every pair are fresh processes: stackcost's is a real `stackcost run ...
--repeats 1 --db <its own store>` whose cell median is read back from the store; each
peer's is a child of `_agreement_peers.py` (or benchmark_app itself). They alternate in
blocks: each block runs every (peer, batch) pair once, in an order shuffled per block
(--seed), and within a pair the side that goes first follows ABBA over blocks (stackcost
first in blocks 1 and 4, the peer first in 2 and 3, ...). The verdict compares the median
of stackcost's block medians with the median of the peer's: PASS within 3%. It needs at
least 5 blocks; fewer is a smoke run and says so. Exit 0 either way.

--device cuda: the same model on the GPU, against two peers that time the eager backend's
own cuda step: torch.utils.benchmark.Timer (which synchronizes around each block of calls)
and triton.testing.do_bench (CUDA events around each call, L2 cleared before each), vs
`stackcost run --backends eager --device cuda` (CudaTimer: CUDA events around each step).
A peer that cannot run (no triton, no CUDA, a CPU-only peer on cuda) is skipped with its
reason. Without CUDA, --device cuda is refused (exit 2). --quick is a smoke run of the code
path: one block, batch 1, 32 px, 0.5 s a side. On cuda the defaults are 5 blocks of
resnet18 at 224 px, batch 32, 1 s a side (a batch that keeps the GPU busy).

    python benchmarks/agreement.py [--design bursts|processes] [--device cpu|cuda] \
        [--blocks 6] [--batch-sizes 1,8] [--resolution 64] [--peers torch,onnxruntime,openvino] \
        [--threads 2] [--min-time 2] [--block-s 2] [--burst-ms 20] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from _agreement_bursts import peer_model_argv, run_bursts, summarize_bursts
from _figures import write_figures
from stackcost.allocators import ALLOCATORS, allocator_problem

TOLERANCE = 0.03
MIN_BLOCKS = 5
HERE = Path(__file__).resolve().parent
PEERS_SCRIPT = HERE / "_agreement_peers.py"
CHILD_TIMEOUT_S = 900  # a stackcost run may queue behind another stackcost measuring here


@dataclass(frozen=True)
class Peer:
    name: str  # --peers name
    label: str  # what the table calls it
    backend: str  # the stackcost backend that runs the same thing
    command: str = ""  # _agreement_peers.py's subcommand, if not the name

    def argv(self) -> list[str]:
        """The peer child's subcommand and its backend."""
        return [self.command or self.name, "--backend", self.backend]


PEERS = {
    p.name: p
    for p in (
        Peer("torch", "torch.utils.benchmark", "eager"),
        # Timer around the step inductor compiled, in the peer's own process (bursts only).
        Peer("inductor", "torch.utils.benchmark", "inductor", command="torch"),
        Peer("onnxruntime", "onnxruntime loop", "onnxruntime"),
        Peer("openvino", "benchmark_app", "openvino"),
        Peer("triton", "triton.testing.do_bench", "eager"),
    )
}
# The peers each device runs by default; any other asked for is skipped with its reason.
DEVICE_PEERS = {"cpu": ("torch", "onnxruntime", "openvino"), "cuda": ("torch", "triton")}
CPU_ONLY = ("inductor",)  # peers a cpu run takes only when asked for


def peer_unavailable(peer: str, device: str) -> str | None:
    """Why `peer` cannot be timed on `device` here, or None when it can."""
    if peer not in DEVICE_PEERS[device] and not (device == "cpu" and peer in CPU_ONLY):
        if peer == "triton":
            return "triton.testing.do_bench times with CUDA events: it needs --device cuda"
        return f"{PEERS[peer].label} runs on the CPU here: not a {device} peer"
    if peer == "triton" and importlib.util.find_spec("triton") is None:
        return "triton is not installed (it ships with CUDA builds of torch)"
    return None


def cuda_unavailable() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device here (torch.cuda.is_available() is False)"
    return None


def _child(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """Run one fresh process; its exit code, the tail of its output, its wall time."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_S, check=False
        )
        rc, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, f"timed out after {CHILD_TIMEOUT_S} s: {e}"
    return rc, out[-2000:], time.perf_counter() - start


def _peer_env(threads: int, allocator: str = "glibc") -> dict[str, str]:
    """The peers' environment: the thread variables and the allocator's settings that
    stackcost's workers get, so the only difference left between the two sides is the
    harness."""
    n = str(threads)
    threads_env = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}
    return {**os.environ, **threads_env, **ALLOCATORS[allocator].env}


def has_resolution(model: str) -> bool:
    """Whether --resolution applies: a zoo model with that axis (a factory's input shape is
    fixed by --input-shape)."""
    from stackcost import zoo

    return ":" not in model and "resolution" in zoo.model_info(model).axes


def model_argv(args: argparse.Namespace) -> list[str]:
    """The model's flags, as `stackcost run` and the peer children take them."""
    if ":" in args.model:
        return ["--model", args.model, "--input-shape", args.input_shape]
    return [args.model, *(["--resolution", str(args.resolution)] if args.resolution else [])]


def subject(args: argparse.Namespace) -> str:
    """The model as titles name it."""
    return args.model + (f", {args.resolution}px" if args.resolution else "")


def stackcost_side(args: argparse.Namespace, backend: str, bs: int, db: Path) -> dict[str, Any]:
    """One `stackcost run` of one cell, one repetition, into its own store; the cell's
    median read back from that store."""
    from stackcost.api import load

    cmd = [
        sys.executable, "-m", "stackcost.cli", "run", *model_argv(args), "--backends", backend,
        "--batch-size", str(bs), "--threads", str(args.threads), "--repeats", "1",
        "--min-time", str(args.min_time), "--device", args.device, "--on-disturbed", "keep",
        "--allocator", args.allocator, "--quiet", "--db", str(db),
    ]  # fmt: skip
    rc, out, wall = _child(cmd)
    base: dict[str, Any] = {"rc": rc, "wall_s": wall}
    if not db.exists():
        return {**base, "error": out.strip().splitlines()[-1] if out.strip() else f"rc {rc}"}
    run = load(db)
    if not run.records:
        return {**base, "error": "no repetition stored"}
    _, rep = run.records[0]
    if rep.stats is None:
        return {**base, "status": rep.status, "error": rep.reason or rep.status}
    return {
        **base,
        "median_ms": rep.stats.median_ms,
        "iqr_ms": rep.stats.iqr_ms,
        "n": rep.stats.n,
        "status": rep.status,
        "stop_reason": rep.stop_reason,
        "reason": rep.reason,
        "run_id": run.run_id,
        "weights_digest": rep.weights_digest,
    }


def _benchmark_app() -> str | None:
    here = Path(sys.executable).parent / "benchmark_app"
    return str(here) if here.exists() else shutil.which("benchmark_app")


_BA_CONFIG = (
    "NUM_STREAMS", "INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT",
    "ENABLE_CPU_PINNING", "OPTIMAL_NUMBER_OF_INFER_REQUESTS",
)  # fmt: skip


def benchmark_app_side(args: argparse.Namespace, onnx: str) -> dict[str, Any]:
    """benchmark_app on the exported graph: f32 in and inside, one stream, T threads, sync
    API (one request at a time, as stackcost's step); its median latency parsed."""
    app = _benchmark_app()
    if app is None:
        return {"error": "benchmark_app not found (it comes with `pip install openvino`)"}
    # -nthreads needs -hint none (a benchmark_app rule); the plugin then reports LATENCY.
    cmd = [
        app, "-m", onnx, "-d", "CPU", "-hint", "none", "-api", "sync", "-nstreams", "1",
        "-nthreads", str(args.threads), "-infer_precision", "f32", "-ip", "f32",
        "-t", str(math.ceil(args.min_time)),  # whole seconds only
    ]  # fmt: skip
    rc, out, wall = _child(cmd, _peer_env(args.threads, args.allocator))
    base: dict[str, Any] = {"rc": rc, "wall_s": wall}
    median = re.search(r"Median:\s+([\d.]+)\s*ms", out)
    if rc != 0 or median is None:
        lines = [ln for ln in out.splitlines() if "ERROR" in ln or "Error" in ln]
        return {**base, "error": (lines or out.strip().splitlines() or [f"rc {rc}"])[-1]}
    count = re.search(r"Count:\s+(\d+)", out)
    config = {k: m.group(1).strip() for k in _BA_CONFIG if (m := re.search(rf"{k}: (.+)", out))}
    return {
        **base,
        "median_ms": float(median.group(1)),
        "n": int(count.group(1)) if count else None,
        "config": config,
    }


def python_peer_side(
    args: argparse.Namespace, peer: str, bs: int, prepared: str, result: Path
) -> dict[str, Any]:
    cmd = [
        sys.executable, str(PEERS_SCRIPT), *PEERS[peer].argv(), "--prepared", prepared,
        *peer_model_argv(args), "--batch-size", str(bs),
        "--threads", str(args.threads), "--min-time", str(args.min_time),
        "--device", args.device, "--result", str(result),
    ]  # fmt: skip
    rc, out, wall = _child(cmd, _peer_env(args.threads, args.allocator))
    if rc != 0 or not result.exists():
        tail = out.strip().splitlines()
        return {"rc": rc, "wall_s": wall, "error": tail[-1] if tail else f"rc {rc}"}
    return {"rc": rc, "wall_s": wall, **json.loads(result.read_text())}


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} ms"


def _said(side: dict[str, Any]) -> str:
    """One side of a pair for the progress line: its median (and status) or its error."""
    if "median_ms" in side:
        status = f" ({side['status']})" if "status" in side else ""
        what = f"{_ms(side['median_ms'])}{status}"
    else:
        what = f"[red]{escape(str(side.get('error')))}[/]"
    return what + (f" in {side['wall_s']:.1f} s" if "wall_s" in side else "")


def summarize(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of block medians per side, their ratio, and the per-block ratios."""
    done = [p for p in pairs if "median_ms" in p["stackcost"] and "median_ms" in p["peer"]]
    out: dict[str, Any] = {"blocks": len(pairs), "blocks_with_both": len(done)}
    if not done:
        return out
    s = statistics.median(p["stackcost"]["median_ms"] for p in done)
    q = statistics.median(p["peer"]["median_ms"] for p in done)
    ratios = [p["ratio"] for p in done]
    out.update(
        {
            "stackcost_median_ms": s,
            "peer_median_ms": q,
            "ratio": s / q,
            "block_ratios": ratios,
            "median_block_ratio": statistics.median(ratios),
            "block_ratio_min": min(ratios),
            "block_ratio_max": max(ratios),
            "pass": abs(s / q - 1) <= TOLERANCE,
        }
    )
    return out


def _report_bursts(
    args: argparse.Namespace,
    peers: list[str],
    batch_sizes: list[int],
    prepared: dict[str, Any],
    pairs: list[dict[str, Any]],
    started: float,
    console: Console,
    load_before: tuple[float, float, float],
    skipped: dict[str, str],
) -> int:
    """The bursts design's table, verdict and figures."""
    wall = time.perf_counter() - started
    load_after = os.getloadavg()
    table = Table(
        title=f"{subject(args)} fp32, {args.threads} threads, allocator {args.allocator}: "
        "stackcost vs peers, "
        f"{args.blocks} block(s) of warm workers alternating ~{args.burst_ms:g} ms bursts "
        f"for {args.block_s:g} s"
    )
    columns = ("peer", "stackcost backend", "batch", "blocks", "stackcost", "peer", "ratio",
               "95% CI (over blocks)", "block ratios (min–max)", "pairs (dropped)", "verdict")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col in ("peer", "stackcost backend") else "right")
    summary: dict[str, Any] = {}
    for peer_name in peers:
        for bs in batch_sizes:
            mine = [p for p in pairs if p["peer_name"] == peer_name and p["batch_size"] == bs]
            s = summarize_bursts(mine, TOLERANCE)
            statuses: dict[str, int] = {}
            for p in mine:
                st = p.get("stackcost", {}).get("status", "error")
                statuses[st] = statuses.get(st, 0) + 1
            s["stackcost_statuses"] = statuses
            summary[f"{peer_name}/b{bs}"] = s
            if "ratio" in s:
                verdict = f"[{'green' if s['pass'] else 'red'}]{'PASS' if s['pass'] else 'FAIL'}[/]"
                verdict += "" if s["blocks_with_both"] >= MIN_BLOCKS else f" (<{MIN_BLOCKS} blocks)"
                cells = (_ms(s["stackcost_ms"]), _ms(s["peer_ms"]), f"{s['ratio']:.4f}",
                         f"{s['ci_low']:.4f}–{s['ci_high']:.4f}",
                         f"{s['block_ratio_min']:.4f}–{s['block_ratio_max']:.4f}",
                         f"{s['pairs_kept']} ({s['pairs_dropped']})")  # fmt: skip
            else:
                errors = {p.get("error") for p in mine}
                verdict = "[yellow]NO DATA[/]"
                cells = ("—", "—", "—", "—", escape("; ".join(e for e in errors if e)[:60]), "—")
            table.add_row(PEERS[peer_name].label, PEERS[peer_name].backend, str(bs),
                          f"{s['blocks_with_both']}/{s['blocks']}", *cells, verdict)  # fmt: skip
    console.print(table)
    console.print(
        f"[dim]ratio = stackcost / peer, the geometric mean over blocks of each block's mean "
        f"burst-pair ratio; each block is a fresh pair of processes. Bursts of stackcost's "
        f"own timer against Timer.timeit (one mean a burst), perf_counter around ORT's run() "
        f"and OpenVINO's InferRequest.latency. Threads bound: {args.bind_threads}; same cores: "
        f"{args.same_cores}. Load average (1 min) {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after. Wall {wall:.0f} s.[/dim]",
        highlight=False,
    )
    foreign = sorted(
        {
            f"{p['peer_name']}/b{p['batch_size']}: {d}"
            for p in pairs
            if (d := p.get("stackcost", {}).get("weights_digest"))
            and d != prepared[str(p["batch_size"])]["weights_digest"]
        }
    )
    if foreign:
        console.print(f"[red]stackcost built other weights than the peers' export[/]: "
                      f"{', '.join(foreign)}")  # fmt: skip
    verdicts = [s.get("pass") for s in summary.values()]
    short = [k for k, s in summary.items() if s["blocks_with_both"] < MIN_BLOCKS]
    if args.blocks < MIN_BLOCKS:
        console.print(f"[yellow]Only {args.blocks} block(s): a smoke run, not a verdict.[/]")
    elif short:
        console.print(f"[yellow]INCOMPLETE[/]: fewer than {MIN_BLOCKS} blocks with both sides "
                      f"for {', '.join(short)}.")  # fmt: skip
    else:
        ok = all(verdicts)
        console.print(
            f"[bold {'green' if ok else 'red'}]{'PASS' if ok else 'FAIL'}[/]: "
            f"{sum(bool(v) for v in verdicts)}/{len(verdicts)} pairs within ±{TOLERANCE:.0%}; "
            f"{sum(s.get('decided', False) for s in summary.values())} with the whole 95% "
            f"interval inside"
        )
    if args.json:
        figures = {
            "model": args.model, "input_shape": args.input_shape, "allocator": args.allocator,
            "design": "bursts", "device": args.device, "quick": args.quick,
            "skipped_peers": skipped, "resolution": args.resolution, "threads": args.threads,
            "batch_sizes": batch_sizes, "blocks": args.blocks, "block_s": args.block_s,
            "burst_ms": args.burst_ms, "bind_threads": args.bind_threads,
            "same_cores": args.same_cores, "seed": args.seed,
            "prepared": prepared, "pairs": pairs, "summary": summary, "wall_s": wall,
            "load_average_before": load_before, "load_average_after": load_after,
            "tolerance": TOLERANCE, "foreign_weights": foreign,
        }  # fmt: skip
        write_figures(args.json, "agreement", figures, console)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--blocks", type=int, default=None, help=f"blocks (default 6, cuda 5; a "
                    f"verdict needs ≥ {MIN_BLOCKS}, fewer is a smoke run)")  # fmt: skip
    ap.add_argument("--batch-sizes", default=None, help="comma list (default 1,8; cuda 32)")
    ap.add_argument(
        "--model",
        default="resnet18",
        help="a zoo name, or module:factory with --input-shape (default resnet18)",
    )
    ap.add_argument("--input-shape", help="a factory's sample shape, e.g. 3,56,56")
    ap.add_argument(
        "--resolution",
        type=int,
        default=None,
        help="input side, px, where the model has one (default 64; cuda 224)",
    )
    ap.add_argument("--allocator", default="glibc", help="the workers' memory allocator, both "
                    "sides (stackcost.allocators; default glibc)")  # fmt: skip
    ap.add_argument("--threads", type=int, default=2, help="threads, every side (default 2)")
    ap.add_argument("--peers", default=None, help="comma list of " + ", ".join(PEERS)
                    + " (default: cpu " + ",".join(DEVICE_PEERS["cpu"]) + "; cuda "
                    + ",".join(DEVICE_PEERS["cuda"]) + ")")  # fmt: skip
    ap.add_argument(
        "--min-time", type=float, default=None,
        help="timed seconds per side per block: stackcost's --min-time, Timer's min_run_time, "
        "the ORT loop's duration, benchmark_app's -t, do_bench's rep (default 2; cuda 1)",
    )  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 block, batch 1, 32 px, "
                    "0.5 s a side (any of those given explicitly wins)")  # fmt: skip
    ap.add_argument(
        "--design",
        choices=("bursts", "processes"),
        help="warm workers alternating bursts (default on cpu), or whole processes (cuda's)",
    )
    ap.add_argument(
        "--block-s",
        type=float,
        default=2.0,
        help="bursts: seconds each block alternates bursts for (default 2)",
    )
    ap.add_argument(
        "--burst-ms",
        type=float,
        default=20.0,
        help="bursts: a burst's length, at least one step (default 20)",
    )
    ap.add_argument(
        "--warmup",
        type=float,
        default=1.0,
        help="bursts: the peer's warm-up seconds (stackcost warms up by its rule)",
    )
    ap.add_argument(
        "--bind-threads",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bursts: torch's OpenMP threads one per core in both workers, as ab does",
    )
    ap.add_argument(
        "--same-cores",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bursts: both workers of a cell narrower than the machine (and unbound) on the "
        "same drawn core(s) each block, as ab does",
    )
    ap.add_argument(
        "--peer-imports-torch",
        action="store_true",
        help="bursts: each peer imports torch first, as stackcost's worker has it loaded",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the per-block pair order")
    ap.add_argument("--workdir", type=Path, help="keep the exports and stores here")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    if args.device not in DEVICE_PEERS:
        ap.error(f"--device {args.device!r}: use cpu or cuda")
    args.design = args.design or ("bursts" if args.device == "cpu" else "processes")
    if args.design == "bursts" and args.device != "cpu":
        ap.error("--design bursts runs the CPU peers; use --design processes on cuda")
    if args.device == "cuda" and (why := cuda_unavailable()):
        print(f"agreement.py: error: --device cuda: {why}; use --device cpu", file=sys.stderr)
        return 2
    quick = {"blocks": 1, "batch_sizes": "1", "resolution": 32, "min_time": 0.5}
    full = {
        # On a GPU, a batch that keeps it busy (resnet18 at 224 px, batch 32, runs ~ms per
        # call), and 5 blocks of 1 s sides: ~4 min with two peers, inside a 10-minute slot.
        "cuda": {"blocks": 5, "batch_sizes": "32", "resolution": 224, "min_time": 1.0},
        "cpu": {"blocks": 6, "batch_sizes": "1,8", "resolution": 64, "min_time": 2.0},
    }[args.device]
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if ":" in args.model and not args.input_shape:
        ap.error(f"--model {args.model}: a factory needs --input-shape")
    if not has_resolution(args.model):
        args.resolution = 0  # a factory's shape, or a model sized by other axes
    if problem := allocator_problem(args.allocator):
        ap.error(f"--allocator: {problem}")
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        ap.error(f"--batch-sizes {args.batch_sizes!r}: a comma list of integers")
    asked = args.peers or ",".join(DEVICE_PEERS[args.device])
    peers = [p.strip() for p in asked.split(",") if p.strip()]
    unknown = [p for p in peers if p not in PEERS]
    if unknown or not peers:
        ap.error(f"--peers {asked!r}: use some of {', '.join(PEERS)}")
    if args.blocks < 1:
        ap.error("--blocks must be ≥ 1")
    skipped = {p: why for p in peers if (why := peer_unavailable(p, args.device))}
    peers = [p for p in peers if p not in skipped]

    # Piped output would otherwise wrap at 80 columns and mangle the table.
    console = Console(width=None if sys.stdout.isatty() else 160)
    for name, why in skipped.items():
        console.print(f"[yellow]skipped[/] {PEERS[name].label}: {escape(why)}", highlight=False)
    if not peers:
        console.print("[yellow]no peer can run here: nothing to compare[/]")
        return 0
    load_before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stackcost-agreement-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        with console.status("exporting the ONNX graphs the peers load"):
            prep_json = work / "prepared.json"
            rc, out, prep_s = _child(
                [sys.executable, str(PEERS_SCRIPT), "prepare", "--out", str(work / "prepared"),
                 *peer_model_argv(args), "--batch-sizes", args.batch_sizes,
                 "--threads", str(args.threads), "--result", str(prep_json),
                 *(["--no-onnx"] if args.device != "cpu" else [])],
                _peer_env(args.threads, args.allocator),
            )  # fmt: skip
        if rc != 0:
            console.print(f"[red]preparing the peers' model failed (rc {rc}):[/]\n{escape(out)}")
            return 0
        prepared = json.loads(prep_json.read_text())
        console.print(
            f"prepared {subject(args)} on {args.device}, batch "
            f"{args.batch_sizes}: weights "
            f"{prepared[str(batch_sizes[0])]['weights_digest']}, exporter "
            f"{prepared[str(batch_sizes[0])]['exporter']} ({prep_s:.1f} s)"
        )

        if args.design == "bursts":
            peer_of = {name: PEERS[name] for name in peers}
            pairs = run_bursts(args, peers, batch_sizes, prepared, work, console, peer_of)
            return _report_bursts(args, peers, batch_sizes, prepared, pairs, started, console,
                                  load_before, skipped)  # fmt: skip
        pairs: list[dict[str, Any]] = []
        block_s: list[float] = []
        for block in range(args.blocks):
            t_block = time.perf_counter()
            order = [(p, bs) for p in peers for bs in batch_sizes]
            random.Random(f"{args.seed}-{block}").shuffle(order)
            first = "stackcost" if block % 4 in (0, 3) else "peer"  # ABBA over blocks
            for peer_name, bs in order:
                peer = PEERS[peer_name]
                record: dict[str, Any] = {
                    "block": block + 1, "peer_name": peer_name, "batch_size": bs, "first": first,
                }  # fmt: skip
                sides = ("stackcost", "peer") if first == "stackcost" else ("peer", "stackcost")
                tag = f"block {block + 1}/{args.blocks} {peer_name} b{bs}"
                for side in sides:
                    with console.status(f"{tag}: {side}"):
                        if side == "stackcost":
                            db = work / "stores" / f"{block + 1}-{peer.backend}-b{bs}.db"
                            db.parent.mkdir(parents=True, exist_ok=True)
                            record[side] = stackcost_side(args, peer.backend, bs, db)
                        elif peer_name == "openvino":
                            record[side] = benchmark_app_side(args, prepared[str(bs)]["onnx_path"])
                        else:
                            result = work / "peers" / f"{block + 1}-{peer_name}-b{bs}.json"
                            result.parent.mkdir(parents=True, exist_ok=True)
                            record[side] = python_peer_side(
                                args, peer_name, bs, prepared[str(bs)]["dir"], result
                            )
                s, q = record["stackcost"], record["peer"]
                if "median_ms" in s and "median_ms" in q:
                    record["ratio"] = s["median_ms"] / q["median_ms"]
                console.print(
                    f"{tag} ({first} first): stackcost {peer.backend} {_said(s)}; "
                    f"{peer.label} {_said(q)}"
                    + (f"; ratio {record['ratio']:.4f}" if "ratio" in record else ""),
                    highlight=False,
                )
                pairs.append(record)
            block_s.append(time.perf_counter() - t_block)
    load_after = os.getloadavg()
    wall = time.perf_counter() - started

    smoke = args.blocks < MIN_BLOCKS
    table = Table(
        title=f"{subject(args)} fp32 on {args.device}, {args.threads} threads: "
        "stackcost vs peers, "
        f"{args.blocks} interleaved block{'s' if args.blocks != 1 else ''} of fresh processes"
    )
    columns = (
        "peer", "stackcost backend", "batch", "blocks", "stackcost", "peer median", "ratio",
        "block ratios (min–max)", "spread", "stackcost statuses", "verdict",
    )  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col in ("peer", "stackcost backend") else "right")
    summary: dict[str, Any] = {}
    for peer_name in peers:
        peer = PEERS[peer_name]
        for bs in batch_sizes:
            mine = [p for p in pairs if p["peer_name"] == peer_name and p["batch_size"] == bs]
            s = summarize(mine)
            statuses: dict[str, int] = {}
            for p in mine:
                st = p["stackcost"].get("status", "error")
                statuses[st] = statuses.get(st, 0) + 1
            s["stackcost_statuses"] = statuses
            summary[f"{peer_name}/b{bs}"] = s
            if "ratio" in s:
                ok = s["pass"]
                verdict = f"[{'green' if ok else 'red'}]{'PASS' if ok else 'FAIL'}[/]"
                short = s["blocks_with_both"] < MIN_BLOCKS
                verdict += f" (<{MIN_BLOCKS} blocks)" if short else ""
                lo, hi = s["block_ratio_min"], s["block_ratio_max"]
                cells = (_ms(s["stackcost_median_ms"]), _ms(s["peer_median_ms"]),
                         f"{s['ratio']:.4f}", f"{lo:.4f}–{hi:.4f}",
                         f"{(hi - lo) / s['median_block_ratio']:.1%}")  # fmt: skip
            else:
                errors = {p["peer"].get("error") or p["stackcost"].get("error") for p in mine}
                verdict = "[yellow]NO DATA[/]"
                cells = ("—", "—", "—", escape("; ".join(e for e in errors if e)[:60]), "—")
            table.add_row(
                peer.label, peer.backend, str(bs), f"{s['blocks_with_both']}/{s['blocks']}",
                *cells, ", ".join(f"{k}×{v}" for k, v in sorted(statuses.items())), verdict,
            )  # fmt: skip
    console.print(table)
    blocks_of = sorted({p["peer"]["block_size"] for p in pairs if "block_size" in p["peer"]})
    console.print(
        f"[dim]ratio = stackcost's median of block medians / the peer's; spread = (max − min) "
        f"of the per-block ratios over their median. torch.utils.benchmark's median is of "
        f"per-block means (calls per block: {', '.join(map(str, blocks_of)) or '—'}); the "
        f"others' are of single calls. benchmark_app feeds random inputs, the others "
        f"stackcost's seeded ones; do_bench clears L2 before every call, stackcost and Timer "
        f"run calls back to back. Load average (1 min) {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after. Wall {wall:.0f} s; per block "
        f"{', '.join(f'{b:.0f} s' for b in block_s)}.[/dim]",
        highlight=False,
    )
    # Same weights on both sides: stackcost's worker records the digest of what it built.
    foreign = sorted(
        {
            f"{p['peer_name']}/b{p['batch_size']}: {d}"
            for p in pairs
            if (d := p["stackcost"].get("weights_digest"))
            and d != prepared[str(p["batch_size"])]["weights_digest"]
        }
    )
    if foreign:
        console.print(
            f"[red]stackcost built other weights than the peers' export[/] "
            f"({prepared[str(batch_sizes[0])]['weights_digest']}): {', '.join(foreign)}"
        )
    disturbed = sum(p["stackcost"].get("status") == "disturbed" for p in pairs)
    if disturbed:
        console.print(
            f"[yellow]stackcost judged {disturbed} of its {len(pairs)} repetitions disturbed by "
            f"other processes; the peers ran on the same busy machine with no such check. "
            f"Rerun when the machine is quiet.[/]"
        )
    verdicts = [s.get("pass") for s in summary.values()]
    short = [k for k, s in summary.items() if s["blocks_with_both"] < MIN_BLOCKS]
    if smoke:
        console.print(
            f"[yellow]Only {args.blocks} block(s): a smoke run, not a verdict "
            f"(use --blocks {MIN_BLOCKS} or more).[/]"
        )
    elif short:
        console.print(
            f"[yellow]INCOMPLETE[/]: fewer than {MIN_BLOCKS} blocks with both sides measured "
            f"for {', '.join(short)} (see the table)."
        )
    else:
        ok = all(verdicts)
        console.print(
            f"[bold {'green' if ok else 'red'}]{'PASS' if ok else 'FAIL'}[/]: "
            f"{sum(bool(v) for v in verdicts)}/{len(verdicts)} pairs within ±{TOLERANCE:.0%}"
        )

    if args.json:
        figures = {
            "model": args.model,
            "input_shape": args.input_shape,
            "allocator": args.allocator,
            "device": args.device,
            "quick": args.quick,
            "skipped_peers": skipped,
            "resolution": args.resolution,
            "threads": args.threads,
            "batch_sizes": batch_sizes,
            "blocks": args.blocks,
            "min_time_s": args.min_time,
            "seed": args.seed,
            "prepared": prepared,
            "pairs": pairs,
            "summary": summary,
            "block_wall_s": block_s,
            "wall_s": wall,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "tolerance": TOLERANCE,
            "smoke": smoke,
            "stackcost_disturbed": disturbed,
            "foreign_weights": foreign,
        }
        write_figures(args.json, "agreement", figures, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""agreement.py's bursts design: each peer as a warm worker alternating bursts with a
stackcost worker of the same cell (issue 40, item 4).

Per block and (peer, batch), two fresh processes start: stackcost's paced worker for the
cell (execute/paced.py: built, prepared, verified and warmed up as any repetition, then
serving bursts) and the peer (`_agreement_peers.py PEER --serve-fd`), which times each
burst its own way. Which one starts first is drawn per block. Both get the environment
stackcost gives the cell's worker (threads, and with --bind-threads torch's OpenMP threads
bound one per core, as `ab` does), so the harness is the only difference left. A cell
narrower than the machine, unbound, has both workers pinned to the same drawn core(s) once
both are warm (--same-cores, as `ab` does): otherwise each sits on its own core for the
block, and a VM's core that runs slower for seconds biases the block. The parent
alternates bursts of about --burst-ms between them for --block-s seconds, in random order
per pair (execute.interleave.alternate, the loop `ab` uses); a pair where either burst saw
other work on the cores is dropped and counted. A block's ratio is the geometric mean of
its pairs' stackcost/peer ratios; the cell's is the geometric mean over blocks, with a
Student-t interval over blocks (each block a fresh pair of processes: the per-process bias
is what the interval must cover). PASS when that ratio is within the tolerance. stackcost's
workers are repetitions of one run in the block's store (`stackcost.db` in the workdir).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from stackcost.execute.interleave import alternate, burst_steps, shared_cores
from stackcost.execute.local import LocalExecutor
from stackcost.execute.paced import BurstChannel, PacedWorker
from stackcost.execute.runner import Runner, prepare
from stackcost.measure.paired import block_log_ratio, ratio_interval
from stackcost.measure.protocol import Protocol
from stackcost.result import RepetitionResult
from stackcost.runspec.run import RunSpec, model_ref
from stackcost.store.database import Store

HERE = Path(__file__).resolve().parent
PEERS_SCRIPT = HERE / "_agreement_peers.py"
CONFIDENCE = 0.95
FINISH_TIMEOUT_S = 120.0


class PeerWorker(BurstChannel):
    """A peer harness on the burst channel; its result is the JSON it writes on stop."""

    def __init__(self, argv: list[str], env: dict[str, str], result: Path, log: Path) -> None:
        self.result_path = result
        super().__init__(lambda fd: [*argv, "--serve-fd", str(fd)], env, log)

    def finish(self) -> dict[str, Any]:
        self.stop()
        try:
            code = self.proc.wait(timeout=FINISH_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # a hung peer is a missing side, not a crash
            self.kill()
            return {"error": f"no result {FINISH_TIMEOUT_S:g} s after the last burst"}
        finally:
            self._replies.close()
        if code == 0 and self.result_path.exists():
            return json.loads(self.result_path.read_text())
        tail = self.log_path.read_text(errors="replace").strip().splitlines()
        return {"error": tail[-1] if tail else f"exit code {code}"}


def peer_model_argv(args: argparse.Namespace) -> list[str]:
    """The model's flags as the peer children (_agreement_peers.py) take them."""
    shape = ["--input-shape", args.input_shape] if args.input_shape else []
    return ["--model", args.model, *shape, "--resolution", str(args.resolution or 0)]


def _stackcost_summary(r: RepetitionResult) -> dict[str, Any]:
    out: dict[str, Any] = {"status": r.status, "weights_digest": r.weights_digest}
    if r.reason:
        out["reason"] = r.reason
    if r.stats is not None:
        out["median_ms"] = r.stats.median_ms
        out["n"] = r.stats.n
    return out


def run_bursts(
    args: argparse.Namespace,
    peers: list[str],
    batch_sizes: list[int],
    prepared: dict[str, Any],
    work: Path,
    console: Console,
    peer_of: dict[str, Any],
) -> list[dict[str, Any]]:
    """Every block's pair records (one per peer and batch), measured as the module says."""
    backends = sorted({peer_of[p].backend for p in peers})
    shape = tuple(int(d) for d in args.input_shape.split(",")) if args.input_shape else None
    spec = RunSpec(
        models=[model_ref(args.model, input_shape=shape)],
        backends=backends,
        batch_sizes=batch_sizes,
        sizes={"resolution": [args.resolution]} if args.resolution else {},
        threads=[args.threads],
        devices=[args.device],
        protocol=Protocol(warmup_max_time_s=args.warmup * 4),
        allocator=args.allocator,
    )
    executor = LocalExecutor()
    rng = random.Random(args.seed)
    pairs: list[dict[str, Any]] = []
    with Store(work / "stackcost.db") as store, executor.session():
        runner = Runner(prepare(spec), store, executor, None, None)
        run_id, _ = runner.open("benchmarks/agreement.py --design bursts", resume=False)
        cells = {(c.backend, c.batch_size): c for c in runner.spec.cells()}
        reps: dict[tuple[str, int], int] = {key: 0 for key in cells}
        try:
            for block in range(args.blocks):
                order = [(p, bs) for p in peers for bs in batch_sizes]
                rng.shuffle(order)
                for peer_name, bs in order:
                    key = (peer_of[peer_name].backend, bs)
                    record = _block(args, runner, executor, run_id, cells[key], reps[key],
                                    peer_of[peer_name], prepared[str(bs)], work, rng,
                                    block)  # fmt: skip
                    reps[key] += 1
                    record |= {"block": block + 1, "peer_name": peer_name, "batch_size": bs}
                    pairs.append(record)
                    ratio = record.get("ratio")
                    console.print(
                        f"block {block + 1}/{args.blocks} {peer_name} b{bs} "
                        f"({record.get('first', '?')} first): "
                        + (f"ratio {ratio:.4f} over {record['kept']} burst pairs "
                           f"({record['dropped']} dropped, {record['steps']} steps a burst)"
                           if ratio else f"[red]no ratio: {record.get('error')}[/]"),
                        highlight=False,
                    )  # fmt: skip
        finally:
            store.finish_run(run_id)
    return pairs


def _block(
    args: argparse.Namespace,
    runner: Runner,
    executor: LocalExecutor,
    run_id: str,
    cell: Any,
    rep: int,
    peer: Any,
    prepared: dict[str, Any],
    work: Path,
    rng: random.Random,
    block: int,
) -> dict[str, Any]:
    """One pair of fresh workers, alternating bursts: the block's record. `peer`: an
    agreement.Peer (its backend and its child's subcommand)."""
    peer_name = peer.name
    scratch = work / "scratch" / f"{peer_name}-b{cell.batch_size}-{rep}"
    task = runner.task_for(run_id, cell, rep, scratch)
    if isinstance(task, RepetitionResult):
        return {"error": f"stackcost cannot run the cell: {task.status}: {task.reason}"}
    task = task.model_copy(update={"bind_threads": args.bind_threads})
    env = executor.environ(task)
    peer_dir = work / "peers" / f"{peer_name}-b{cell.batch_size}-{rep}"
    peer_dir.mkdir(parents=True, exist_ok=True)
    peer_argv = [
        sys.executable, str(PEERS_SCRIPT), *peer.argv(), "--prepared", prepared["dir"],
        *peer_model_argv(args), "--batch-size", str(cell.batch_size),
        "--threads", str(args.threads), "--min-time", str(args.block_s),
        "--device", args.device, "--result", str(peer_dir / "result.json"),
        "--warmup", str(args.warmup), *(["--import-torch"] if args.peer_imports_torch else []),
    ]  # fmt: skip
    first = rng.sample(("stackcost", "peer"), 2)
    values: dict[str, list[float]] = {"stackcost": [], "peer": []}
    cores = None
    if args.same_cores:
        cores = shared_cores(task.cell, args.bind_threads, args.seed, block)
    record: dict[str, Any] = {"first": first[0], "cores": sorted(cores) if cores else None}
    with executor.lock.held():
        workers: dict[str, Any] = {}
        for side in first:
            workers[side] = (
                PacedWorker(executor.python, env, task)
                if side == "stackcost"
                else PeerWorker(peer_argv, env, peer_dir / "result.json", peer_dir / "log")
            )
        ready = {side: workers[side].ready() for side in first}
        if cores:
            for w in workers.values():
                w.pin(cores)
        steps = burst_steps(workers, args.burst_ms, rng) if all(ready.values()) else None
        if steps:
            alt = alternate(workers, steps, args.block_s, rng)
            values = alt.values()
            record |= {"steps": steps, "kept": alt.kept, "dropped": alt.dropped}
        result = workers["stackcost"].finish()
        record["peer"] = workers["peer"].finish()
    runner.record(run_id, cell, result)
    record["stackcost"] = _stackcost_summary(result)
    if values["stackcost"] and values["peer"]:
        for side in ("stackcost", "peer"):
            record[side]["burst_mean_ms"] = statistics.geometric_mean(values[side])
        record["ratio"] = math.exp(block_log_ratio(values["peer"], values["stackcost"]))
    else:
        record["error"] = (
            record["peer"].get("error")
            or record["stackcost"].get("reason")
            or ("a worker ended before it was warm")
        )
    return record


def summarize_bursts(pairs: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """The cell's ratio (geometric mean over blocks) and its interval over blocks."""
    done = [p for p in pairs if "ratio" in p]
    out: dict[str, Any] = {"blocks": len(pairs), "blocks_with_both": len(done)}
    if not done:
        return out
    logs = [math.log(p["ratio"]) for p in done]
    ratio, low, high = ratio_interval(logs, CONFIDENCE)
    out.update(
        {
            "stackcost_ms": statistics.geometric_mean(
                p["stackcost"]["burst_mean_ms"] for p in done
            ),
            "peer_ms": statistics.geometric_mean(p["peer"]["burst_mean_ms"] for p in done),
            "ratio": ratio,
            "ci_low": low,
            "ci_high": high,
            "confidence": CONFIDENCE,
            "block_ratios": [p["ratio"] for p in done],
            "block_ratio_min": min(p["ratio"] for p in done),
            "block_ratio_max": max(p["ratio"] for p in done),
            "pairs_kept": sum(p.get("kept", 0) for p in done),
            "pairs_dropped": sum(p.get("dropped", 0) for p in pairs),
            "pass": abs(ratio - 1) <= tolerance,
            # Whether the interval itself lies inside the band: the agreement shown, not
            # only a point estimate that happens to fall inside it.
            "decided": low >= 1 - tolerance and high <= 1 + tolerance,
        }
    )
    return out


__all__ = ["run_bursts", "summarize_bursts"]

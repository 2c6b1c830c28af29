"""`stackcost heldout MODEL`: held-out accuracy of trained weights, fp32 and quantized, on
each rung.

The weights come from `stackcost train --keep-weights`, kept under their recipe; a recipe
not kept yet is trained first, through that same command (eager only).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from stackcost.axes import QUANTIZED
from stackcost.env import cores
from stackcost.errors import SpecError
from stackcost.outputs import check_output_dir, check_output_file, write_output
from stackcost.report.fit import FitTable
from stackcost.runspec.grammar import parse_choices, parse_positive_ints, split_list

if TYPE_CHECKING:
    from collections.abc import Callable

    from stackcost.cell import Cell, ModelRef
    from stackcost.scenarios.decoder_heldout import DecoderHeldout
    from stackcost.scenarios.heldout import Heldout
    from stackcost.scenarios.user_heldout import Windows

RUNGS = "eager,inductor,export-aot,onnxruntime,openvino"
PRECISIONS = ("fp32", *QUANTIZED)
# A decoder trained on text: the rungs that generate, at the precisions they generate at.
DECODER_RUNGS = "eager,inductor,onnxruntime,openvino,llama.cpp"
DECODER_PRECISIONS = ("fp32", "w8", "w4")
DEFAULT_WEIGHTS = Path.home() / ".cache" / "stackcost" / "weights"
OUTPUTS = (".json", ".md")
STYLE = {
    "ok": "green",
    "undecided": "yellow",
    "wrong": "bold red",
    "failed": "red",
    "unsupported": "dim",
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "heldout",
        help="held-out accuracy of trained weights, fp32 and quantized, on each rung",
    )
    p.add_argument(
        "model",
        help="a model `stackcost train` takes (e.g. resnet18, or a decoder: llama-tiny), or "
        "your own checkpoint folder, hf:./folder, scored on --data",
    )
    p.add_argument(
        "--data",
        help="a checkpoint's own examples: a causal LM's text (.txt, a folder of .txt, or "
        ".jsonl with a text field); a classifier's labelled examples (.csv or .jsonl with "
        "text [text_pair] and label, or an image folder with one subfolder per class)",
    )
    p.add_argument(
        "--calibration",
        help="a checkpoint's examples int8 calibrates on, in --data's format (default: a "
        "share of --data, never scored)",
    )
    p.add_argument(
        "--calibration-share",
        help="the share of --data int8 calibrates on when no --calibration is given "
        "(default 0.2; those examples are not scored)",
    )
    p.add_argument(
        "--dataset",
        help="an image dataset (default digits), or stdlib-text for a decoder (its default)",
    )
    p.add_argument("--data-dir", help="directory holding the dataset's files")
    p.add_argument(
        "--backends",
        help=f"comma list (default {RUNGS}; for a decoder {DECODER_RUNGS})",
    )
    p.add_argument(
        "--precision",
        help=f"comma list of {', '.join(PRECISIONS)} (default: all; a decoder's: "
        f"{', '.join(DECODER_PRECISIONS)}; fp32 always runs, as each rung's baseline, and "
        "eager fp32 as the reference)",
    )
    p.add_argument(
        "-c", "--config", action="append", default=[], metavar="KEY=VALUE",
        help="config override of a Hugging Face model, as stackcost train takes it",
    )  # fmt: skip
    p.add_argument("--prompt-len", help="a decoder's context in tokens (default 128)")
    p.add_argument(
        "--batch-size",
        help="the batch each rung is built for and evaluated in, the last one padded "
        "(default 64; a decoder's 16 windows, within onnxruntime-genai's 32)",
    )
    p.add_argument(
        "--calibration-samples",
        default="256",
        help="training-split samples int8 calibrates on (default 256)",
    )
    # Training, when the recipe has no kept weights yet: `stackcost train`'s own defaults.
    p.add_argument("--epochs", help="training epochs (default: stackcost train's)")
    p.add_argument("--train-batch-size", help="training mini-batch (default: stackcost train's)")
    p.add_argument("--lr", help="learning rate (default: stackcost train's)")
    p.add_argument("--optimizer", help="sgd or adam (default: stackcost train's)")
    p.add_argument("--seed", help="seed for weights and shuffling (default 0)")
    p.add_argument(
        "--limit",
        help="use the first N samples of each split (a checkpoint: score at most N examples, "
        "or N windows of a decoder's text)",
    )
    p.add_argument("--threads", default=str(cores()), help=f"intra-op threads (default {cores()})")
    p.add_argument(
        "--weights-dir",
        type=Path,
        default=DEFAULT_WEIGHTS,
        help="where trained weights are kept by recipe (default ~/.cache/stackcost/weights)",
    )
    p.add_argument(
        "--db",
        default="stackcost.db",
        help="store the held-out rows (and a training run) go to (default ./stackcost.db)",
    )
    p.add_argument(
        "--option", action="append", default=[], metavar="BACKEND.KEY=VALUE",
        help="a decoder's rung option, as stackcost run's -o takes it "
        "(e.g. llama.cpp.w4_type=Q4_K_M, onnxruntime.accuracy_level=1); repeatable",
    )  # fmt: skip
    p.add_argument("-o", "--output", help="also write the rows to this .json or .md file")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def train_args(args: argparse.Namespace) -> argparse.Namespace:
    """The `stackcost train` command that trains (and keeps) this recipe's weights: eager
    only, the flags given here, its own defaults for the rest."""
    from stackcost.commands import train

    parser = argparse.ArgumentParser(prog="stackcost")
    train.add_parser(parser.add_subparsers())
    argv = [
        "train", args.model, "--backends", "eager",
        "--keep-weights", str(args.weights_dir), "--db", args.db, "--threads", args.threads,
    ]  # fmt: skip
    for config in args.config:
        argv += ["-c", config]
    for flag, value in (
        ("--dataset", args.dataset),
        ("--prompt-len", args.prompt_len),
        ("--data-dir", args.data_dir),
        ("--epochs", args.epochs),
        ("--batch-size", args.train_batch_size),
        ("--lr", args.lr),
        ("--optimizer", args.optimizer),
        ("--seed", args.seed),
        ("--limit", args.limit),
    ):
        if value is not None:
            argv += [flag, value]
    return parser.parse_args([*argv, *(["--quiet"] if args.quiet else [])])


def check_args(
    args: argparse.Namespace, decoder: bool = False
) -> tuple[list[str], list[str], int, int]:
    """Backends, precisions, batch and calibration samples; SpecError on bad input.
    `decoder`: a causal LM on text, whose defaults are the generating rungs'."""
    from stackcost.backends import check_name

    rungs, allowed = (DECODER_RUNGS, DECODER_PRECISIONS) if decoder else (RUNGS, PRECISIONS)
    backends = split_list(args.backends or rungs, "--backends", rungs)
    for name in backends:
        check_name(name)
    if decoder:
        from stackcost.backends import is_import_path, load_backend

        mute = [b for b in backends if not is_import_path(b) and load_backend(b).generator is None]
        if mute:
            raise SpecError(
                f"--backends {','.join(mute)}: a decoder's held-out text is scored by the "
                f"rungs that generate ({DECODER_RUNGS})"
            )
        from stackcost.scenarios.decoder_heldout import window_problem

        # Before training: a recipe whose windows cannot be scored is refused, not trained.
        if args.prompt_len is not None:
            prompt_len = parse_positive_ints(args.prompt_len, "prompt length")[0]
            if problem := window_problem(prompt_len):
                raise SpecError(problem)
    precisions = parse_choices(args.precision or ",".join(allowed), "precision", allowed)
    batch = parse_positive_ints(args.batch_size or ("16" if decoder else "64"), "batch size")[0]
    samples = parse_positive_ints(args.calibration_samples, "calibration samples")[0]
    parse_positive_ints(args.threads, "threads")
    if args.limit is not None and batch > parse_positive_ints(args.limit, "limit")[0]:
        raise SpecError(
            f"--batch-size {batch} is more than the {args.limit} training samples --limit "
            "keeps: no full batch to calibrate on"
        )
    rung_options(args, backends, decoder)
    if args.output is not None:
        if Path(args.output).suffix not in OUTPUTS:
            raise SpecError(f"-o {args.output!r}: write a {' or '.join(OUTPUTS)} file")
        check_output_file(Path(args.output), "-o")
    check_output_dir(args.weights_dir, "--weights-dir")
    from stackcost.store.database import check_writable

    if problem := check_writable(Path(args.db)):
        raise SpecError(f"--db: {problem}")
    return backends, precisions, batch, samples


def rung_options(
    args: argparse.Namespace, backends: list[str], decoder: bool
) -> dict[str, dict[str, str]]:
    """--option as {backend: {key: value}}; SpecError for an image model (its rungs are
    built as a timing cell's defaults), a rung not being scored, or a value the rung
    does not take."""
    from stackcost.backends import is_import_path, load_backend
    from stackcost.runspec.grammar import parse_options

    options = parse_options(args.option)
    if options and not decoder:
        raise SpecError("--option applies to a decoder's rungs (an image model's use defaults)")
    for name, given in options.items():
        if name not in backends:
            raise SpecError(f"--option given for backend {name!r}, which is not being scored")
        if not is_import_path(name) and (problem := load_backend(name).check_options(given)):
            raise SpecError(problem)
    return options


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.commands import train
    from stackcost.zoo.checkpoint import is_checkpoint_name

    if args.model.startswith("hf:") and is_checkpoint_name(args.model.removeprefix("hf:")):
        return checkpoint_run(args, console)
    for flag, value in (("--data", args.data), ("--calibration", args.calibration),
                        ("--calibration-share", args.calibration_share)):  # fmt: skip
        if value is not None:
            raise SpecError(
                f"{flag} applies to a checkpoint folder (hf:./folder); {args.model} is "
                "trained and scored on --dataset"
            )
    targs = train_args(args)
    decoder = train.trains_text(targs)
    backends, precisions, batch, samples = check_args(args, decoder)
    cell = next(c for c in train.spec_from_args(targs).spec.cells() if c.backend == "eager")
    # Only once the recipe is accepted: a refusal is not kept waiting on torch's import.
    import torch

    from stackcost.execute import scratch
    from stackcost.scenarios.heldout import evaluate
    from stackcost.scenarios.train import kept_weights

    err = Console(stderr=True)
    weights = kept_weights(args.weights_dir, cell)
    if weights is None:
        assert cell.train is not None
        err.print(
            Text(
                f"training {args.model} on {cell.train.dataset} ({cell.train.epochs} epochs, "
                f"eager): no weights kept for this recipe in {args.weights_dir} yet"
            )
        )
        train.run(targs, console)
        weights = kept_weights(args.weights_dir, cell)
        if weights is None:
            err.print(Text("training kept no weights (see its table): nothing to evaluate"))
            return 1
    else:
        err.print(Text(f"trained weights kept for this recipe: {weights}"))

    def started(backend: str, precision: str) -> None:
        if not args.quiet:
            err.print(Text(f"evaluating {backend} {precision} on the held-out split…"))

    torch.set_num_threads(cell.threads)
    if decoder:
        return decoder_run(args, cell, weights, backends, precisions, batch, console, started)
    workdir = scratch.make()
    try:
        rows = evaluate(
            cell, weights, backends, precisions, batch, workdir, args.data_dir, samples, started
        )
    finally:
        scratch.remove(workdir)
    dataset = cell.train.dataset if cell.train else ""
    return show_rows(args, cell, rows, weights, dataset, console)


def show_rows(
    args: argparse.Namespace,
    cell: Cell,
    rows: list[Heldout],
    weights: Path,
    dataset: str,
    console: Console,
    record: dict[str, Any] | None = None,
) -> int:
    """Store the judged rows (each against eager fp32 and its rung's fp32), print their
    table, write -o; the exit code (1 when a row is wrong or failed)."""
    kept = Kept(args, cell, weights, cell.model, "accuracy_drop_pt", record)
    for row in rows:
        kept.add(row.record(), row.drop_pt)
    console.print(table(rows, args.model, dataset, weights))
    Console(stderr=True).print(Text(kept.where()))
    if args.output is not None:
        record = {"model": args.model, "weights": str(weights), **(record or {})}
        write_rows(Path(args.output), markdown(rows, args.model, weights), record, rows)
    return 1 if any(r.status in ("wrong", "failed") for r in rows) else 0


def checkpoint_run(args: argparse.Namespace, console: Console) -> int:
    """A user's checkpoint folder on the user's own --data (commands/heldout_checkpoint.py
    checks and reads them): a decoder's perplexity table, or a classifier's accuracy one."""
    from stackcost.commands import heldout_checkpoint as given

    ck = given.checked(args)
    backends, precisions, batch, _ = check_args(args, ck.decoder)
    err = Console(stderr=True)
    if ck.decoder:
        cell, windows = given.decoder_inputs(args, ck, batch)
        record = windows.record
        err.print(Text(f"scoring {args.model} on {record['data']}: {record['windows']} windows"))
    else:
        inputs = given.classifier_inputs(args, ck, precisions, batch)
        cell = inputs.cell
        err.print(Text(f"scoring {args.model} on {inputs.dataset}"))
    # Only once everything given is accepted: a refusal is not kept waiting on torch.
    import torch

    from stackcost.execute import scratch
    from stackcost.scenarios.heldout import evaluate_split

    torch.set_num_threads(cell.threads)
    folder = Path(ck.folder)
    if ck.decoder:
        return decoder_run(
            args, cell, folder, backends, precisions, batch, console, given.started(args), windows
        )
    workdir = scratch.make()
    try:
        rows = evaluate_split(
            cell, None, inputs.test, inputs.calibration, backends, precisions, batch, workdir,
            given.started(args),
        )  # fmt: skip
    finally:
        scratch.remove(workdir)
    return show_rows(args, cell, rows, folder, inputs.dataset, console, inputs.record)


class Kept:
    """The held-out rows of this command in --db, under a run of their own (its command,
    recipe, the user's data where given, and environment): a row is committed as soon as it
    is judged, and the report's
    Pareto figure reads it for timing cells of the same weights (store/heldout.py)."""

    def __init__(
        self,
        args: argparse.Namespace,
        cell: Cell,
        weights: Path,
        model: ModelRef,
        metric: str,
        data: dict[str, Any] | None = None,
    ) -> None:
        from stackcost.commands.run import this_command
        from stackcost.env import collect
        from stackcost.store.database import HELDOUT_KIND
        from stackcost.store.heldout import identity

        self.db, self.metric = args.db, metric
        self.model, self.identity = model.name, identity(model)
        self.spec = {
            "kind": HELDOUT_KIND,
            "model": model.model_dump(mode="json"),
            "weights": str(weights),
            "recipe": cell.model_dump(mode="json"),
            "metric": metric,
            # A checkpoint's own examples: what they were and how they were fed.
            **({"data": data} if data else {}),
        }
        self.env = collect([cell.threads])
        self.command = this_command()
        self.run_id: str | None = None
        self.count = 0

    def add(
        self, record: dict[str, Any], lost: float | None, options: dict[str, str] | None = None
    ) -> None:
        """A row (its record), the quality it lost in this run's metric, and the options
        its rung was built with."""
        from stackcost.store.database import Store

        with Store(self.db) as store:
            if self.run_id is None:  # the run is created with its first row: none is empty
                self.run_id = store.create_run(self.spec, self.env, self.command)
            store.add_heldout(
                self.run_id, self.model, self.identity, self.metric, lost, record, options or {}
            )
            store.finish_run(self.run_id)  # finished as of its latest row
        self.count += 1

    def where(self) -> str:
        if self.run_id is None:
            return "no held-out row to store"
        return f"stored {self.count} held-out rows as run {self.run_id} in {self.db}"


def write_rows(path: Path, markdown_text: str, record: dict, rows: list) -> None:
    """-o: the table as markdown (.md), or `record` with every row's record (.json)."""
    rows_json = {**record, "rows": [r.record() for r in rows]}
    text = markdown_text if path.suffix == ".md" else json.dumps(rows_json, indent=2)
    write_output(path, text, "-o")


def _pct(value: float | None, low: float | None = None, high: float | None = None) -> str:
    if value is None:
        return "—"
    return f"{value:.1%}" + ("" if low is None or high is None else f" [{low:.1%}, {high:.1%}]")


def _pt(value: float | None, low: float | None = None, high: float | None = None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} pt" + ("" if low is None or high is None else f" [{low:.1f}, {high:.1f}]")


def _cells(r: Heldout) -> list[str]:
    return [
        r.backend,
        r.precision,
        r.status,
        _pct(r.accuracy),
        _pct(r.fp32_accuracy),
        _pct(r.top1, r.top1_low, r.top1_high),
        _pt(r.drop_pt, r.drop_low_pt, r.drop_high_pt),
        r.reason or r.rule,
    ]


HEADERS = ("backend", "precision", "status", "accuracy", "fp32", "top-1 vs eager fp32", "drop")


def table(rows: list[Heldout], model: str, dataset: str, weights: Path) -> FitTable:
    from stackcost.scenarios.heldout import CONFIDENCE

    title = Text(f"held-out accuracy: {model} on {dataset} (weights {weights})")
    t = FitTable(title=title, drop=("top-1 vs eager fp32", "fp32"))
    for h in (*HEADERS, "rule or reason"):
        t.add_column(h, justify="right" if h in HEADERS[3:] else "left")
    for r in rows:
        cells = _cells(r)
        cells[2] = Text(r.status, style=STYLE.get(r.status, ""))
        t.add_row(*(c if isinstance(c, Text) else Text(c) for c in cells))
    t.caption = Text(  # Text: the brackets are the interval's, not rich markup
        "accuracy: top-1 against the test split's labels; fp32: the same rung's fp32 (eager's "
        "where it failed); drop: fp32 - accuracy, in points; a quantized precision is judged "
        "by its rule (axes.QUANTIZED). [low, high]: exact (Clopper-Pearson) for the "
        f"agreement, Tango's score interval for the drop, each bound one-sided "
        f"{(1 + CONFIDENCE) / 2:.0%}, over the {rows[0].samples if rows else 0} held-out "
        "samples: wrong when a rule's interval lies wholly outside it, undecided when the "
        "observed value misses the rule but the interval does not exclude it, ok when each "
        "observed value meets its rule (the reason names an interval reaching past it)"
    )
    return t


def markdown(rows: list[Heldout], model: str, weights: Path) -> str:
    lines = [
        f"Held-out accuracy: {model}, weights {weights}",
        "",
        "| " + " | ".join((*HEADERS, "rule or reason")) + " |",
        "|" + "---|" * (len(HEADERS) + 1),
    ]
    for r in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |")
    return "\n".join(lines) + "\n"


def decoder_run(
    args: argparse.Namespace,
    cell: Cell,
    checkpoint: Path,
    backends: list[str],
    precisions: list[str],
    batch: int,
    console: Console,
    started: Callable[[str, str], None],
    text: Windows | None = None,
) -> int:
    """The held-out text through every generating rung and precision (decoder_heldout):
    the recipe's, or the user's own `text`."""
    from stackcost.execute import scratch
    from stackcost.runspec.run import model_ref
    from stackcost.scenarios.decoder_heldout import evaluate

    ref = model_ref(f"hf:{checkpoint}")
    options = rung_options(args, backends, True)
    # As a timing cell of this checkpoint names it: hf:/abs/path and its files' sha256.
    kept = Kept(
        args, cell, checkpoint, ref, "ppl_increase_pct", text.record if text is not None else None
    )
    workdir = scratch.make()
    try:
        rows = evaluate(
            cell,
            ref,
            backends,
            precisions,
            batch,
            workdir,
            started,
            lambda r: kept.add(r.record(), r.ppl_increase_pct, r.options),
            options,
            (text.ids, text.labels, text.half) if text is not None else None,
        )
    finally:
        scratch.remove(workdir)
    data = f"{text.record['data']} ({text.record['how']})" if text is not None else None
    console.print(decoder_table(rows, args.model, checkpoint, data))
    Console(stderr=True).print(Text(kept.where()))
    if args.output is not None:
        record = {"model": args.model, "checkpoint": str(checkpoint)}
        if text is not None:
            record["text"] = text.record
        md = decoder_markdown(rows, args.model, checkpoint, data)
        write_rows(Path(args.output), md, record, rows)
    return 1 if any(r.status in ("wrong", "failed") for r in rows) else 0


DECODER_HEADER = (
    "backend", "precision", "status", "perplexity", "Δppl", "KL mean", "KL p99", "same top",
    "weights", "tokens",
)  # fmt: skip


def _decoder_cells(r: DecoderHeldout) -> list[str]:
    def num(value: float | None, fmt: str, unit: str = "") -> str:
        return "—" if value is None else format(value, fmt) + unit

    reference = (r.backend, r.precision) == ("eager", "fp32")
    options = " ".join(f"{k}={v}" for k, v in sorted(r.options.items()))
    return [
        f"{r.backend} ({options})" if options else r.backend,
        r.precision,
        r.status,
        num(r.perplexity, ".3f"),
        "ref" if reference else _increase(r),
        num(r.kl_mean, ".2e"),
        num(r.kl_p99, ".2e"),
        num(r.same_top, ".1%"),
        num(None if r.weight_bytes is None else r.weight_bytes / 2**20, ".2f", " MiB"),
        str(r.tokens) if r.tokens else "—",
    ]


def _increase(r: DecoderHeldout) -> str:
    """Δppl with its interval: '+0.42% [+0.10, +0.75]'."""
    if r.ppl_increase_pct is None:
        return "—"
    text = f"{r.ppl_increase_pct:+.2f}%"
    if r.ppl_increase_low_pct is not None and r.ppl_increase_high_pct is not None:
        text += f" [{r.ppl_increase_low_pct:+.2f}, {r.ppl_increase_high_pct:+.2f}]"
    return text


def _decoder_note(
    rows: list[DecoderHeldout], model: str, checkpoint: Path, data: str | None = None
) -> list[str]:
    from stackcost.scenarios.decoder_heldout import CONFIDENCE

    windows = max((r.windows for r in rows), default=0)  # an unsupported row scored none
    notes = [
        f"{model} from {checkpoint}, on {data or 'its held-out stdlib-text windows'}: the "
        "second half of each window scored through the rung's teacher-forced path (prefill, "
        "then decode steps); perplexity = exp(mean next-token NLL); Δppl and KL(eager fp32 "
        "|| rung) against eager fp32's full forward, [low, high] a t interval over the "
        f"{windows} windows' paired NLL differences (each bound one-sided "
        f"{(1 + CONFIDENCE) / 2:.0%}); weights = the rung's own weight bytes"
    ]
    notes += [f"{r.backend} {r.precision}: {r.reason}" for r in rows if r.reason]
    rules = sorted({f"{r.precision}: {r.rule}" for r in rows if r.rule})
    return notes + [f"rules: {'; '.join(rules)}"] if rules else notes


def decoder_table(
    rows: list[DecoderHeldout], model: str, checkpoint: Path, data: str | None = None
) -> FitTable:
    t = FitTable(title=Text(f"held-out text: {model}"))
    for h in DECODER_HEADER:
        t.add_column(h, justify="left" if h in DECODER_HEADER[:3] else "right")
    for r in rows:
        cells = [Text(c) for c in _decoder_cells(r)]
        cells[2] = Text(r.status, style=STYLE.get(r.status, ""))
        t.add_row(*cells)
    t.caption = Text("; ".join(_decoder_note(rows, model, checkpoint, data)))
    return t


def decoder_markdown(
    rows: list[DecoderHeldout], model: str, checkpoint: Path, data: str | None = None
) -> str:
    lines = ["| " + " | ".join(DECODER_HEADER) + " |", "|" + "---|" * len(DECODER_HEADER)]
    lines += ["| " + " | ".join(_decoder_cells(r)) + " |" for r in rows]
    return "\n".join([*lines, "", *_decoder_note(rows, model, checkpoint, data), ""])

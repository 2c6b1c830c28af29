"""`stackcost list models|backends`: what exists, and why a backend can't run here."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.api import catalog
from stackcost.api.catalog import SIZE_AXES, BackendInfo, BackendOption, Input, Workload
from stackcost.axes import PRECISIONS
from stackcost.report.fit import FitTable


def input_text(spec: Input, workload: Workload) -> str:
    """'input_ids int64[batch, seq_len]': the batch and size axes stay symbolic; a model
    field (in_channels) shows the entry's default."""
    fields = {"in_channels": workload.in_channels}
    dims = ", ".join(str(fields.get(d, d)) if isinstance(d, str) else str(d) for d in spec.shape)
    return f"{spec.name} {spec.dtype}[{dims}]"


def size_text(workload: Workload, axis: str) -> str:
    """'--seq-len 128 tokens (max 512)': the flag that sets it, the default, its bounds."""
    a = SIZE_AXES[axis]
    bounds = [
        f"{word} {v}"
        for word, v in (("min", workload.minimum.get(axis)), ("max", workload.maximum.get(axis)))
        if v is not None
    ]
    return f"{a.flag} {a.show(workload.sizes[axis])}" + (
        f" ({', '.join(bounds)})" if bounds else ""
    )


def add_parser(sub: Any) -> None:
    p = sub.add_parser("list", help="list models or backends, and why one is unavailable")
    p.add_argument("what", choices=["models", "backends"])


def run(args: argparse.Namespace, console: Console) -> int:
    # Descriptions and reasons are Text: "pip install 'stackcost[onnx]'" is not markup.
    table = models_table() if args.what == "models" else backends_table()
    console.print(table)
    return 0


def models_table() -> FitTable:
    """The zoo: each model's inputs, size axes and classes."""
    table = FitTable(header_style="bold")
    for col in ("model", "domain", "inputs", "sizes (default)", "classes", "description"):
        # Descriptions wrap first, so an input or a size reads on one line where it can.
        table.add_column(col, overflow="fold", max_width=30 if col == "description" else None)
    for w in catalog.models():
        table.add_row(
            w.name,
            w.domain,
            Text("\n".join(input_text(i, w) for i in w.inputs)),
            Text("\n".join(size_text(w, a) for a in w.axes) or "—"),
            str(w.num_classes) if w.num_classes else "—",
            Text(w.description),
        )
    table.caption = Text(
        "inputs: name dtype[shape], the dims named by what sets them (batch: --batch-size; "
        "a size axis: its flag); --model also takes hf:<model_type> (a Hugging Face "
        "architecture built offline from its config; -c key=value, --head) or "
        "package.module:ATTR (your own nn.Module factory); "
        f"init schemes: {', '.join(catalog.init_schemes())}"
    )
    return table


def backends_table() -> FitTable:
    """Every rung: whether it runs here (else why not), what it runs, its options."""
    table = FitTable(header_style="bold")
    for col in (
        "backend",
        "available",
        "modes",
        "devices",
        "precisions",
        "description / reason; options (-o BACKEND.KEY=VALUE, default first)",
    ):
        # Precisions wrap (nine of them on a torch rung) so a reason's install line fits.
        table.add_column(col, max_width=20 if col == "precisions" else None)
    for b in catalog.backends():
        table.add_row(
            b.name,
            Text("yes", style="green") if b.available else Text("no", style="red"),
            ",".join([*b.modes, *(["generate"] if b.generates else [])]),
            ",".join(b.devices),
            ", ".join(p for p in PRECISIONS if p in b.precisions) if b.modes else "—",
            backend_text(b),
        )
    return table


def backend_text(b: BackendInfo) -> Text:
    """Its description (or why it is unavailable), then what else a reader should know."""
    # GPU code that compiled but never ran: said whether or not this machine has a GPU.
    unrun = "\nnot yet run on a GPU: no number of it is measured" if b.not_yet_run_on_gpu else ""
    # A rung that generates says so; its generator's precisions go with the description.
    gen = b.generate_precisions
    generates = f"\ngenerate: {','.join(gen)}" if gen is not None else ""
    return (
        Text(b.description if b.available else b.reason)
        + Text(unrun, style="yellow")
        + Text(generates, style="dim")
        + (Text(f"\noptions: {options_line(b.options)}", style="dim") if b.options else "")
    )


def options_line(options: tuple[BackendOption, ...]) -> str:
    """'mode=default|max-autotune; freezing=false|true': each option's values, default first."""
    return "; ".join(f"{o.key}={'|'.join(o.values)}{'' if o.choices else '|…'}" for o in options)

"""`stackcost list models|backends`: what exists, and why a backend can't run here."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.axes import PRECISIONS
from stackcost.report.fit import FitTable
from stackcost.workload import SIZE_AXES, Input, Workload


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
    table = FitTable(header_style="bold")
    if args.what == "models":
        from stackcost import zoo

        for col in ("model", "domain", "inputs", "sizes (default)", "classes", "description"):
            # Descriptions wrap first, so an input or a size reads on one line where it can.
            table.add_column(col, overflow="fold", max_width=30 if col == "description" else None)
        for w in zoo.MODELS.values():
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
            f"init schemes: {', '.join(zoo.INIT_SCHEMES)}"
        )
    else:
        from stackcost.backends import REGISTRY, load_backend

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
        for name in REGISTRY:
            b = load_backend(name)
            a, caps, gen = b.available(), b.capabilities, b.generate_capabilities()
            modes = sorted(caps.modes - {"generate"})
            # A rung that generates says so; its generator's precisions go with the description.
            generates = f"\ngenerate: {','.join(sorted(gen.precisions))}" if gen else ""
            # GPU code that compiled but never ran: said whether or not this machine has a GPU.
            unrun = (
                "\nnot yet run on a GPU: no number of it is measured"
                if b.not_yet_run_on_gpu
                else ""
            )
            table.add_row(
                name,
                Text("yes", style="green") if a.ok else Text("no", style="red"),
                ",".join([*modes, *(["generate"] if gen else [])]),
                ",".join(sorted(caps.devices)),
                ", ".join(p for p in PRECISIONS if p in caps.precisions) if modes else "—",
                Text(b.description if a.ok else a.reason)
                + Text(unrun, style="yellow")
                + Text(generates, style="dim")
                + (Text(f"\noptions: {options_line(b.options)}", style="dim") if b.options else ""),
            )
    console.print(table)
    return 0


def options_line(options: dict) -> str:
    """'mode=default|max-autotune; freezing=false|true': each option's values, default first."""
    from stackcost.backends.base import as_option

    parts = []
    for key, declared in options.items():
        option = as_option(declared)
        rest = [c for c in option.choices if c != option.default]
        parts.append(f"{key}={'|'.join([option.default, *rest])}{'' if option.choices else '|…'}")
    return "; ".join(parts)

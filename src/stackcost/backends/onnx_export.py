"""ONNX export shared by the ONNX Runtime and OpenVINO rungs, so both run the same graph."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from stackcost.backends.base import PrepareContext
    from stackcost.cell import Cell
    from stackcost.workload import Example

EXPORTERS = ("dynamo", "legacy")


def output_names(model: torch.nn.Module, example: Example) -> list[str]:
    """The model's output tensors named as verification names them ("logits",
    "last_hidden_state"; "output_1" for the second of a tuple), from one eager call."""
    import torch

    from stackcost.verify import leaves

    with torch.inference_mode():
        names = [name for name, _ in leaves(example.call(model))]
    return [f"output_{n}" if n.isdigit() else n.replace(".", "_") for n in names]


def why_failed(error: BaseException) -> str:
    """One line for a failed export: the dynamo exporter's message is a page of advice with
    the cause under "## Exception summary"."""
    lines = [line.strip() for line in str(error).splitlines()]
    if "## Exception summary" in lines:
        cause = [line for line in lines[lines.index("## Exception summary") + 1 :] if line]
        if cause:
            return cause[0][:200]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:200]


def onnx_for(
    model: torch.nn.Module,
    example: Example,
    cell: Cell,
    ctx: PrepareContext,
    exporter: str,
    fallback: bool,
) -> tuple[Path, dict[str, Any]]:
    """The cell's ONNX graph and its export record: exported into this repetition's
    workdir, or, with the run's artifact cache, exported once and reused by the cell's
    later repetitions (ONNX Runtime and OpenVINO cells of one shape share it: "so both
    run the same graph")."""
    if ctx.cache is None:
        path = ctx.workdir / "onnx" / "model.onnx"
        return path, export_onnx(model, example, path, exporter, fallback)
    import torch

    key = {
        "artifact": "onnx",
        "model": cell.model.key_data(),
        "weights": ctx.weights_digest,
        "batch_size": cell.batch_size,
        "sizes": cell.sizes,
        "precision": cell.precision,
        "device": cell.device,
        "exporter": exporter,
        "fallback": fallback,
        "torch": torch.__version__,
    }
    home, details = ctx.cache.reuse_or_make(
        key, lambda d: export_onnx(model, example, d / "model.onnx", exporter, fallback)
    )
    return home / "model.onnx", details


def export_onnx(
    model: torch.nn.Module,
    example: Example,
    path: Path,
    exporter: str,
    fallback: bool = False,
) -> dict[str, Any]:
    """Export to `path` and return what to record. Every input and output is named in the
    graph: the inputs as the workload names them, the outputs as `output_names`.

    With `fallback` (the user did not choose an exporter), a model the dynamo exporter
    cannot decompose (T5's attention in torch 2.13) is exported by the legacy TorchScript
    exporter instead, and the record says so (`exporter_fallback`).

    `path` should sit in a directory of its own: its size, external weights included, is
    the sum of the files there.
    """
    if exporter not in EXPORTERS:
        raise ValueError(f"onnx exporter {exporter!r}: use {' or '.join(EXPORTERS)}")
    try:
        return _export(model, example, path, exporter)
    except Exception as error:
        if not fallback or exporter != "dynamo":
            raise
        reason = why_failed(error)
    for stale in path.parent.iterdir():  # what the failed export left would count as size
        if stale.is_file():
            stale.unlink()
    details = _export(model, example, path, "legacy")
    return {**details, "exporter_fallback": f"dynamo failed ({reason}); exported by legacy"}


def _export(model: torch.nn.Module, example: Example, path: Path, exporter: str) -> dict[str, Any]:
    import logging
    import time
    import warnings

    import onnx
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)

    # The dynamo exporter logs a warning per torchvision op it cannot register and both
    # exporters warn about deprecations; quiet them for this call only.
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    outputs = output_names(model, example)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(
                model,
                example.args,
                str(path),
                kwargs=example.kwargs or None,
                dynamo=exporter == "dynamo",
                input_names=list(example.names),
                output_names=outputs,
                verbose=False,  # the dynamo exporter prints progress lines otherwise
            )
    finally:
        logger.setLevel(level)
    export_s = time.perf_counter() - start

    # The exporter's default opset (not pinned): read back what it wrote.
    graph = onnx.load(str(path), load_external_data=False)
    opset = next((o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")), None)
    return {
        "onnx_inputs": [i.name for i in graph.graph.input],
        "onnx_outputs": [o.name for o in graph.graph.output],
        "exporter": exporter,
        "opset": opset,
        "onnx_bytes": sum(f.stat().st_size for f in path.parent.iterdir() if f.is_file()),
        "export_s": export_s,
        "onnx": onnx.__version__,
    }


def feeds_by_name(names: list[str]) -> Callable[[Example], dict[str, np.ndarray]]:
    """An Example as the graph's inputs, by the names the export gave them (an exporter
    may drop an input the graph never reads)."""
    import numpy as np

    def feeds(example: Example) -> dict[str, np.ndarray]:
        given = example.named()
        return {n: np.ascontiguousarray(given[n].detach().cpu().numpy()) for n in names}

    return feeds


def derived(
    artifact: str,
    export: dict[str, Any],
    cell: Cell,
    ctx: PrepareContext,
    versions: Mapping[str, str],
    make: Callable[[Path], dict[str, Any]],
) -> tuple[Path, dict[str, Any]]:
    """A graph made from the cell's fp32 ONNX graph (a quantized one: `artifact` names
    which), in its directory, and the details to record: made once per cell with the run's
    artifact cache, keyed by the fp32 graph it came from, the precision, the tools'
    `versions` and the calibration set; into the workdir without one."""
    exported = export.get("artifact")
    if ctx.cache is None:
        home = ctx.workdir / artifact
        home.mkdir(parents=True, exist_ok=True)
        return home, {**export, **make(home)}
    calibration = ctx.calibration
    key = {
        "artifact": artifact,
        # The fp32 graph's own key (its model, weights, shapes, exporter, torch).
        "onnx": exported["key"] if exported else None,
        "weights": ctx.weights_digest,
        "precision": cell.precision,
        **versions,
        "calibration": calibration.record() if calibration and cell.precision == "int8" else None,
    }
    home, made = ctx.cache.reuse_or_make(key, make)
    # Startup is reported only when this prepare exported and made the graph itself.
    made["artifact"] = {
        **made["artifact"],
        "reused": bool(exported and exported["reused"]) and made["artifact"]["reused"],
        "onnx": exported,
    }
    return home, {**export, **made}

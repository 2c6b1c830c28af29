"""Held-out accuracy of trained weights on each rung and precision (`stackcost heldout`).

Verification on random weights says how far a quantized output is from fp32's; whether
quantization costs accuracy needs weights that learned something. The weights `stackcost
train --keep-weights` kept go through each rung's `prepare`, as a measured cell's do (a
quantized precision calibrating on batches of the dataset's training split, never the
test split), and the prepared model's `infer` runs over the whole test split in batches of
the cell's size. A quantized answer is judged by its precision's rule (axes.QuantRule):
top-1 agreement with eager fp32's predictions, and the accuracy drop below the same rung's
fp32, in points.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stackcost.axes import QUANTIZED

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import Backend
    from stackcost.cell import Cell
    from stackcost.data.splits import Split
    from stackcost.quantize import Calibration
    from stackcost.workload import Example

REFERENCE = ("eager", "fp32")  # whose predictions every other answer is compared with
# Another rung's fp32 runs the same weights: it must decide as eager does, up to rounding.
FP32_MIN_TOP1 = 0.99
FP32_MAX_DROP_PT = 1.0
# Training-split samples a static precision calibrates on: real images, a few batches.
CALIBRATION_SAMPLES = 256


@dataclass(frozen=True)
class Heldout:
    """One rung and precision on the test split. `status`: ok, wrong (the rule broken),
    unsupported (the rung cannot build it), failed (an exception, in `reason`)."""

    backend: str
    precision: str
    status: str
    reason: str = ""
    samples: int = 0
    accuracy: float | None = None  # top-1 against the labels, a fraction
    fp32_accuracy: float | None = None  # the same rung's fp32 (eager's when that one failed)
    top1: float | None = None  # agreement with eager fp32's predictions, a fraction
    drop_pt: float | None = None  # (fp32_accuracy - accuracy) x 100
    rule: str = ""

    def record(self) -> dict[str, Any]:
        """As details["heldout"] holds it (report.quant.heldout_drop_pt reads it)."""
        return asdict(self)


@dataclass(frozen=True)
class _Answer:
    backend: str
    precision: str
    predictions: np.ndarray | None = None
    status: str = ""  # unsupported or failed; "" when it answered
    reason: str = ""


def evaluate(
    cell: Cell,
    weights: Path,
    backends: list[str],
    precisions: list[str],
    batch: int,
    workdir: Path,
    data_dir: str | None = None,
    calibration_samples: int = CALIBRATION_SAMPLES,
    on_start: Callable[[str, str], None] | None = None,
) -> list[Heldout]:
    """Every backend x precision of `cell`'s model (a train cell: its model, sizes and
    dataset) with the state_dict at `weights`, on the test split. Eager fp32 is always
    evaluated first (the reference), and fp32 on every rung (its drop's baseline)."""
    import torch

    from stackcost import zoo
    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.data.splits import load_splits

    workload = zoo.workload_of(cell.model)
    splits = load_splits(cell, workload, data_dir)
    state = torch.load(weights, weights_only=True)
    calibration = training_batches(splits["train"], batch, calibration_samples, cell)
    test = splits["test"]
    order = [REFERENCE[0], *(b for b in backends if b != REFERENCE[0])]
    wanted = ["fp32", *(p for p in precisions if p != "fp32")]
    cache = ArtifactCache(workdir / "artifacts")  # one ONNX export for ORT and OpenVINO
    answers: list[_Answer] = []
    for name in order:
        for precision in wanted if name in backends else ["fp32"]:
            if on_start is not None:
                on_start(name, precision)
            answers.append(
                _answer(name, precision, cell, state, calibration, test, batch, workdir, cache)
            )
    judged = judge(answers, test.labels.numpy())
    return [h for h in judged if h.backend in backends and h.precision in precisions]


def training_batches(train: Split, batch: int, samples: int, cell: Cell) -> Calibration:
    """The first `samples` of the training split (at least one batch), in batches of
    `batch`: what a static precision calibrates on."""
    from stackcost.data.splits import Batches
    from stackcost.quantize import Calibration

    batches = Batches(train, batch, drop_last=True)
    count = max(1, min(len(batches), -(-samples // batch)))
    index = batches.order(None)
    examples = [batches.get(index, i)[0] for i in range(count)]
    dataset = cell.train.dataset if cell.train else "the dataset"
    return Calibration(
        examples,
        f"{dataset} training split: its first {count * batch} samples, in stored order",
    )


def heldout_batches(test: Split, batch: int) -> list[tuple[Example, int]]:
    """The test split in batches of exactly `batch` (the rungs are built for one shape):
    the last one padded by repeating its last sample; each with its count of real rows."""
    import torch

    from stackcost.data.splits import Batches

    batches = Batches(test, batch, drop_last=False)
    index = batches.order(None)
    out = []
    for i in range(len(batches)):
        x, y = batches.get(index, i)
        rows = len(y)

        def pad(t: torch.Tensor, rows: int = rows) -> torch.Tensor:
            extra = t[-1:].expand(batch - rows, *t.shape[1:])
            return torch.cat([t, extra]) if rows < batch else t

        out.append((x.map(pad), rows))
    return out


def _answer(
    name: str,
    precision: str,
    cell: Cell,
    state: dict[str, torch.Tensor],
    calibration: Calibration,
    test: Split,
    batch: int,
    workdir: Path,
    cache: Any,
) -> _Answer:
    """One rung and precision's predictions on the test split, or why there are none."""
    from stackcost.backends import load_backend
    from stackcost.backends.base import Unsupported
    from stackcost.clip import one_line

    try:
        backend = load_backend(name)
        available = backend.available()
        if not available.ok:
            return _Answer(name, precision, status="unsupported", reason=available.reason)
        infer_cell = cell.model_copy(
            update={
                "backend": name, "mode": "infer", "batch_size": batch, "precision": precision,
                "device": "cpu", "train": None, "backend_options": {},
            }
        )  # fmt: skip
        why = backend.why_not(infer_cell)
        if why:
            return _Answer(name, precision, status="unsupported", reason=why)
        predictions = _predict(backend, infer_cell, state, calibration, test, batch, workdir, cache)
        if predictions is None:
            reason = f"{name} hands back no infer hook: its step runs only its own example"
            return _Answer(name, precision, status="unsupported", reason=reason)
        return _Answer(name, precision, predictions)
    except Unsupported as error:
        return _Answer(name, precision, status="unsupported", reason=one_line(str(error)))
    except Exception as error:  # noqa: BLE001 - a failed rung is a row, never a crash
        reason = one_line(f"{type(error).__name__}: {error}")
        return _Answer(name, precision, status="failed", reason=reason)


def _predict(
    backend: Backend,
    cell: Cell,
    state: dict[str, torch.Tensor],
    calibration: Calibration,
    test: Split,
    batch: int,
    workdir: Path,
    cache: Any,
) -> np.ndarray | None:
    """The argmax of the first output over the test split, padded rows dropped."""
    from stackcost import zoo
    from stackcost.backends import PrepareContext
    from stackcost.quantize import is_quantized
    from stackcost.verify import to_numpy

    model = zoo.build_model(cell.model, cell.sizes)  # fresh: a rung may change it in place
    model.load_state_dict(state)
    ctx = PrepareContext(
        workdir=workdir / f"{cell.backend}-{cell.precision}",
        cache=cache,
        weights_digest=zoo.weights_digest(model),
        calibration=calibration if is_quantized(cell.precision) else None,
    )
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    predictions = []
    # Every rung runs in this process: the compilers' deprecation and caching warnings
    # (a worker's stderr in `stackcost run`) would otherwise land among the table's lines.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The example a rung is built on is a training batch: the test split feeds infer.
        prepared = backend.prepare(model, calibration.examples[0], cell, ctx)
        if prepared.infer is None:
            return None
        for x, rows in heldout_batches(test, batch):
            logits = to_numpy(prepared.infer(x))
            predictions.append(logits.reshape(batch, -1).argmax(axis=1)[:rows])
    return np.concatenate(predictions)


def judge(answers: list[_Answer], labels: np.ndarray) -> list[Heldout]:
    """Each answer's accuracy, agreement and drop, judged: a quantized precision by its
    QuantRule; fp32 on another rung by FP32_MIN_TOP1 and FP32_MAX_DROP_PT."""
    found = {(a.backend, a.precision): a.predictions for a in answers}
    reference = found.get(REFERENCE)

    def accuracy(predictions: np.ndarray | None) -> float | None:
        return None if predictions is None else float(np.mean(predictions == labels))

    out = []
    for a in answers:
        if a.predictions is None:
            out.append(Heldout(a.backend, a.precision, a.status, a.reason))
            continue
        acc = accuracy(a.predictions)
        base = accuracy(found.get((a.backend, "fp32")))
        if a.precision == "fp32" or base is None:  # fp32 itself, or its rung's failed
            base = accuracy(reference)
        top1 = None if reference is None else float(np.mean(a.predictions == reference))
        drop = None if base is None or acc is None else (base - acc) * 100
        status, reason, rule = _verdict(a, top1, drop)
        out.append(
            Heldout(
                a.backend, a.precision, status, reason, len(labels), acc, base, top1, drop, rule
            )
        )
    return out


def _verdict(a: _Answer, top1: float | None, drop: float | None) -> tuple[str, str, str]:
    """(status, reason, rule) for an answer that has predictions."""
    if (a.backend, a.precision) == REFERENCE:
        return "ok", "", "the reference"
    if a.precision in QUANTIZED:
        rule_of = QUANTIZED[a.precision]
        min_top1, max_drop = rule_of.min_top1, rule_of.max_accuracy_drop
    else:
        min_top1, max_drop = FP32_MIN_TOP1, FP32_MAX_DROP_PT
    rule = f"top-1 agreement >= {min_top1:.0%}, accuracy drop <= {max_drop:g} pt"
    broken = []
    if top1 is not None and top1 < min_top1:
        broken.append(f"top-1 agreement {top1:.1%} < {min_top1:.0%}")
    if drop is not None and (math.isnan(drop) or drop > max_drop):
        broken.append(f"accuracy drop {drop:.1f} pt > {max_drop:g} pt")
    return ("wrong", "; ".join(broken), rule) if broken else ("ok", "", rule)

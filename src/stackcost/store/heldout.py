"""Held-out results as the views read them: the latest per model, rung and precision.

`stackcost heldout` stores each rung and precision of trained weights under a run of its
own (Store.add_heldout). A timing cell of the same network on the same rung, precision
and rung options takes the quality lost from the latest such row: the Pareto figure's y for that cell.

The same network: the same model name and `identity`. A checkpoint folder's identity is
its files' sha256 (the timing cell runs those very weights). A zoo model's is its
architecture (classes, channels, config, head): its timing cells run seeded random
weights, as every timing cell does, so the row says what the trained weights of that
architecture lose, and a resnet18 trained on digits (10 classes, 1 channel) is not taken
for a 1000-class resnet18.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stackcost.cell import ModelRef
from stackcost.store.database import Store

# What `value` holds, by metric: the quality lost, higher is worse.
METRICS = {
    "accuracy_drop_pt": "held-out accuracy drop (points)",
    "ppl_increase_pct": "held-out perplexity increase (%)",
}


@dataclass(frozen=True)
class HeldoutResult:
    run_id: str  # the held-out evaluation's run
    backend: str
    precision: str
    status: str
    metric: str  # a METRICS key
    value: float | None
    record: dict[str, Any]


# Model name, identity, backend, precision, the rung's options (JSON with sorted keys).
Key = tuple[str, str, str, str, str]


def identity(model: ModelRef) -> dict[str, Any]:
    """What besides its name makes a model the same network (the module docstring)."""
    if model.checkpoint:
        return {"checkpoint": model.checkpoint}
    return model.model_dump(
        mode="json",
        include={"num_classes", "in_channels", "conv_bias", "input_shape", "config", "head"},
    )


def key(
    model: ModelRef, backend: str, precision: str, options: dict[str, str] | None = None
) -> Key:
    return (
        model.name,
        json.dumps(identity(model), sort_keys=True),
        backend,
        precision,
        json.dumps(options or {}, sort_keys=True),
    )


def latest(store: Store, models: set[str] | None = None) -> dict[Key, HeldoutResult]:
    """The newest held-out row per key, of `models` only when given."""
    found: dict[Key, HeldoutResult] = {}
    for row in store.heldout():  # oldest first: a later row replaces an earlier one
        if models is not None and row["model"] not in models:
            continue
        k = (
            row["model"],
            row["identity_json"],
            row["backend"],
            row["precision"],
            row["options_json"],
        )
        found[k] = HeldoutResult(
            run_id=row["run_id"],
            backend=row["backend"],
            precision=row["precision"],
            status=row["status"],
            metric=row["metric"],
            value=row["value"],
            record=json.loads(row["record_json"]),
        )
    return found

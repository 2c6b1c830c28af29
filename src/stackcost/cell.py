"""The unit of measurement: a cell is workload x backend x device x threads.

These types are plain data (pydantic) so they cross process boundaries as JSON,
are stored verbatim, and can be hashed into a stable key for resume and compare.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stackcost.axes import DEVICES, GRID_AXES, GRID_COLUMNS, PRECISIONS

# generate: greedy token generation, prefill then decode with a KV cache (--scenario generate).
Mode = Literal["infer", "train", "generate"]
# The values of axes.py's table (a Literal over a tuple is one over its members).
Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
Device = Literal[DEVICES]  # type: ignore[valid-type]

HF_PREFIX = "hf:"  # --model hf:<model_type>: a Hugging Face architecture from its config

MODES: tuple[str, ...] = ("infer", "train", "generate")
GENERATE = "generate"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ModelRef(Frozen):
    """Which network and how it is built: everything that determines its weights."""

    name: str  # a zoo name ("resnet50") or a "package.module:factory" path
    num_classes: int = 1000
    in_channels: int = 3
    conv_bias: bool = False
    init: str = "torch-default"
    # Per-sample input shape for a user factory (e.g. (3, 224, 224)); None for zoo models,
    # whose shape follows from in_channels and the cell's resolution.
    input_shape: tuple[int, ...] | None = None
    seed: int = 0
    # Hugging Face models ("hf:bert"): config fields the user overrode (-c key=value), and
    # the head on top of the base model (None: the type's default). Left out of the key
    # when unset, so keys of cells stored before they existed are unchanged.
    config: dict[str, int | float | bool | str] = Field(default_factory=dict)
    head: str | None = None
    # A checkpoint folder ("hf:/abs/path", zoo/checkpoint.py): its weight files' sha256 and
    # its config, as found when the run was given it. Part of the key (a folder whose files
    # changed is another model); left out when empty, so other models' keys are unchanged.
    checkpoint: dict[str, Any] = Field(default_factory=dict, exclude_if=lambda v: not v)
    # --trust-pickle: a checkpoint's pickle weights may be loaded (unpickling runs code).
    trust_pickle: bool = Field(False, exclude_if=lambda v: not v)

    @property
    def is_hf(self) -> bool:
        return self.name.startswith(HF_PREFIX)

    @property
    def checkpoint_path(self) -> str | None:
        """The folder of a checkpoint model ("hf:/abs/path"); None for anything else."""
        rest = self.name.removeprefix(HF_PREFIX)
        return rest if self.is_hf and "/" in rest else None

    @property
    def is_factory(self) -> bool:
        """A user's "package.module:ATTR", imported only in children."""
        return ":" in self.name and not self.is_hf

    @property
    def needs_probe(self) -> bool:
        """Whether its workload lives in code the parent does not import (a factory,
        transformers, a config or head override): learned in the probe's child."""
        return self.is_factory or self.is_hf or bool(self.config or self.head)

    def key_data(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        for name in ("config", "head"):
            if not data[name]:
                del data[name]
        return data


class TrainConfig(Frozen):
    """What a training cell learns from and how: part of the cell's identity.

    The data directory is not: it says where the files are, not what they are.
    """

    dataset: str = "digits"
    epochs: int = 5
    lr: float = 0.05
    optimizer: Literal["sgd", "adam"] = "sgd"
    momentum: float = 0.9
    # cosine: the learning rate decays to 0 over all steps, so the final epoch's accuracy
    # is not at the mercy of the last large step (BatchNorm's running stats lag it).
    schedule: Literal["cosine", "constant"] = "cosine"
    limit: int | None = None  # first N samples of each split (small runs)
    data_seed: int = 0  # shuffling: epoch e uses torch.Generator().manual_seed(data_seed + e)
    # On a GPU, batches are copied from page-locked host memory unless this says pageable
    # (the study's comparison). Left out of the key when False: older cells keep theirs.
    pageable: bool = Field(False, exclude_if=lambda v: not v)


# MLPerf LoadGen's deployment scenarios (stackcost.scenarios), as `--scenario` spells them:
# the one list of their names (scenarios/settings.py's KINDS gives each its settings).
SCENARIOS: tuple[str, ...] = ("single-stream", "multi-stream", "server", "offline")
ScenarioName = Literal[SCENARIOS]  # type: ignore[valid-type]


class ScenarioConfig(Frozen):
    """A LoadGen deployment scenario and the settings that shape its answer: part of the
    cell's identity. Settings a scenario does not read stay None (or 1), so two cells of
    one scenario differ only where their numbers could. What LoadGen is told from a
    calibration (expected latency, starting QPS) is recorded with the result instead."""

    name: ScenarioName
    latency_bound_ms: float | None = Field(None, gt=0)  # server: p99 must stay under it
    samples_per_query: int | None = Field(None, ge=1)  # multi-stream
    instances: int = Field(1, ge=1)  # server, offline: prepared steps serving concurrently
    min_duration_ms: int = Field(ge=0)
    min_query_count: int = Field(ge=1)
    # Server serving generated tokens (mode generate): p99 TTFT and TPOT must stay under
    # them. Left out of the cell's key when None, so stored LoadGen cells keep theirs.
    # Left out of dumps when None, so exports of stores written before them are unchanged.
    ttft_bound_ms: float | None = Field(None, gt=0, exclude_if=lambda v: v is None)
    tpot_bound_ms: float | None = Field(None, gt=0, exclude_if=lambda v: v is None)

    def key_data(self) -> dict[str, Any]:
        return self.model_dump(mode="json")  # the token bounds are left out when None

    def label(self) -> str:
        """'server 50ms x2', 'multi-stream 8/q', 'single-stream', 'server TTFT 2000ms
        TPOT 200ms'."""
        extra = []
        if self.latency_bound_ms is not None:
            extra.append(f"{self.latency_bound_ms:g}ms")
        if self.ttft_bound_ms is not None:
            extra.append(f"TTFT {self.ttft_bound_ms:g}ms")
        if self.tpot_bound_ms is not None:
            extra.append(f"TPOT {self.tpot_bound_ms:g}ms")
        if self.samples_per_query is not None:
            extra.append(f"{self.samples_per_query}/q")
        if self.instances > 1:
            extra.append(f"x{self.instances}")
        return " ".join([self.name, *extra])


class ServeConfig(Frozen):
    """A serve cell's rate sweep (serving/sweep.py): part of the cell's identity, as a
    LoadGen scenario's settings are. Rates are requests/s; times are seconds."""

    # Defaults: four engines' sweeps of llama-150m fit in 20 minutes on 2 cores.
    rates: int = Field(4, ge=0)  # between one at a time and all at once
    per_rate_s: float = Field(15.0, gt=0)  # how long each rate is held
    budget_s: float = Field(240.0, gt=0)  # the whole sweep of one cell, all its rates
    arrivals: Literal["poisson", "constant"] = "poisson"
    lengths: str = "fixed"  # fixed, uniform:LO-HI or file:PATH (serving/lengths.py)
    ttft_bound_ms: float | None = Field(None, gt=0)  # goodput's SLO
    tpot_bound_ms: float | None = Field(None, gt=0)

    def label(self) -> str:
        bounds = [f"TTFT {self.ttft_bound_ms:g}ms"] if self.ttft_bound_ms else []
        bounds += [f"TPOT {self.tpot_bound_ms:g}ms"] if self.tpot_bound_ms else []
        return " ".join(["serve", f"{self.rates} rates x {self.per_rate_s:g}s", *bounds])


class Cell(Frozen):
    model: ModelRef
    backend: str
    mode: Mode = "infer"
    batch_size: int = 1
    # The workload's size axes and their values: {"resolution": 224}, {"seq_len": 128}, or
    # {} for a model without one. Cells stored before this read "resolution" (see below).
    sizes: dict[str, int] = Field(default_factory=lambda: {"resolution": 224})
    precision: Precision = "fp32"
    threads: int = 1
    device: Device = "cpu"
    # Backend knobs the user set (e.g. {"variant": "script"}); the defaults a backend
    # actually used are recorded with each repetition's details instead.
    backend_options: dict[str, str] = Field(default_factory=dict)
    # Set for mode "train" only; left out of the key when None so inference keys stay stable.
    train: TrainConfig | None = None
    # A LoadGen scenario (stackcost.scenarios) instead of the timed loop; left out of the key
    # when None, like `train`, so every timed-loop key stays what it was.
    scenario: ScenarioConfig | None = None
    # Mode generate served under load (`--scenario serve`); left out of the key when None.
    serve: ServeConfig | None = Field(None, exclude_if=lambda v: v is None)

    @model_validator(mode="before")
    @classmethod
    def _resolution_is_a_size(cls, data: Any) -> Any:
        """Cells written before size axes existed (and callers that still say
        resolution=...) carry an image resolution."""
        if isinstance(data, dict) and "resolution" in data:
            data = dict(data)
            resolution = data.pop("resolution")
            if "sizes" in data and data["sizes"] != {"resolution": resolution}:
                raise ValueError("give either resolution or sizes, not both")
            data["sizes"] = {"resolution": resolution}
        return data

    @property
    def resolution(self) -> int | None:
        """The image side in px, for image workloads; None for others."""
        return self.sizes.get("resolution")

    def key(self) -> str:
        """A stable digest of everything that defines the cell.

        An image cell hashes exactly as it did before size axes were general ("resolution"
        at the top level), so history and compare still match runs stored before."""
        data = self.model_dump(mode="json")
        data["model"] = self.model.key_data()
        if self.train is None:
            del data["train"]
        data.pop("serve", None)  # dumped only when set, then it is part of the key
        if self.serve is not None:
            data["serve"] = self.serve.model_dump(mode="json")
        if self.scenario is None:
            del data["scenario"]
        else:
            data["scenario"] = self.scenario.key_data()
        sizes = data.pop("sizes")
        if list(sizes) == ["resolution"]:
            data["resolution"] = sizes["resolution"]
        else:
            data["sizes"] = sizes
        blob = json.dumps(data, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def size_label(self) -> str:
        """The sizes with their units: '224 px', '128 tokens' ('' when there are none)."""
        from stackcost.workload import show_sizes

        return show_sizes(self.sizes)

    def label(self) -> str:
        sizes = "".join(f" {v}{SIZE_TAGS.get(k, k)}" for k, v in self.sizes.items())
        grid = " ".join(GRID_AXES[a].tag.format(getattr(self, a)) for a in GRID_COLUMNS)
        scenario = f" [{self.scenario.label()}]" if self.scenario else ""
        return (
            f"{self.model.name} {self.backend} {self.mode} b{self.batch_size}{sizes} "
            f"{grid}{scenario}"
        )

    def flat(self) -> dict[str, Any]:
        """Columns for tables and DataFrames: one per size axis the cell has."""
        return {
            "model": self.model.name,
            "backend": self.backend,
            "mode": self.mode,
            "batch_size": self.batch_size,
            **self.sizes,
            "sizes": self.size_label(),
            **{a: getattr(self, a) for a in GRID_COLUMNS},
            "init": self.model.init,
            # Only on scenario cells: a timed-loop run's columns stay what they were.
            **({"scenario": self.scenario.label()} if self.scenario else {}),
        }


# Short unit tags for one-line cell labels: "resnet50 eager infer b8 224px ...".
SIZE_TAGS = {
    "resolution": "px",
    "seq_len": "tok",
    "samples": "smp",
    "prompt_len": "p",
    "new_tokens": "n",
}

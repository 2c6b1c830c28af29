"""A training repetition: the inference task plus where the shared initial weights are."""

from __future__ import annotations

from typing import ClassVar

from stackcost.execute.task import RepetitionTask


class TrainTask(RepetitionTask):
    worker: ClassVar[str] = "stackcost.train.worker"

    weights_path: str  # state_dict saved once by the parent: every backend starts from it
    weights_digest: str  # what the loaded weights must hash to (zoo.weights_digest)
    data_dir: str | None = None

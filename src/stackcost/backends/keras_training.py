"""What the Keras-based rungs train with: the run's optimizer, schedule and loss, rebuilt
from Keras' own parts so every level follows the same recipe as eager.

- SGD with momentum and Adam from `keras.optimizers`, the learning rate a constant or
  `CosineDecay` to 0 over the run's steps (torch's CosineAnnealingLR, stepped per step);
- the loss `SparseCategoricalCrossentropy(from_logits=True)`: torch's cross_entropy over
  logits (and over log-probabilities too, as log_softmax is idempotent).

Where Keras' arithmetic differs from torch's, and why it stays within the agreement the
report checks over the first steps (stated in RECIPE_NOTES, recorded with each run):

- momentum: torch keeps v = mu*v + g and steps lr_t*v; Keras keeps m = mu*m - lr_t*g. The
  same update at a constant rate; under the cosine schedule Keras weighs each past
  gradient by its own step's rate, a relative difference of about (1 - lr_t/lr_t-k), under
  1e-4 over the first steps of a run of hundreds;
- Adam's epsilon: Keras adds it to sqrt(v), torch to sqrt(v / (1 - beta2^t)): set to
  torch's 1e-8 it differs by a factor under 32 in the first step and tends to 1, against
  gradients many orders above it;
- BatchNorm's running variance: torch updates it with the unbiased batch variance,
  Keras with the biased one (a factor (n-1)/n per update): evaluation only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import OptimizerFactory

RECIPE_NOTES = (
    "Keras' SGD folds each step's learning rate into its momentum (torch applies the "
    "current rate to it); Adam's epsilon is added before bias correction; BatchNorm's "
    "running variance is the biased one"
)


def learning_rate(factory: OptimizerFactory) -> Any:
    """The run's rate: a constant, or a Keras schedule of the step (0 for the first)."""
    import keras

    train = factory.train
    if train.schedule == "cosine":
        return keras.optimizers.schedules.CosineDecay(train.lr, max(factory.total_steps, 1))
    return train.lr


def keras_optimizer(factory: OptimizerFactory) -> Any:
    """The run's optimizer and learning-rate schedule as Keras builds them."""
    import keras

    train, rate = factory.train, learning_rate(factory)
    if train.optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=rate, momentum=train.momentum)
    return keras.optimizers.Adam(learning_rate=rate, epsilon=1e-8)  # torch's epsilon


def cross_entropy() -> Any:
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def to_torch(array: Any) -> torch.Tensor:
    """A framework's output (numpy, a TF or JAX array) as a CPU torch tensor."""
    import numpy as np
    import torch

    return torch.from_numpy(np.array(array))


def recipe(optimizer: Any) -> dict[str, Any]:
    """What the record says about the optimizer the framework ran."""
    config = optimizer.get_config()
    rate = config.get("learning_rate")
    return {
        "optimizer": type(optimizer).__name__,
        "optimizer_config": {k: config[k] for k in ("momentum", "epsilon") if k in config},
        "lr_schedule_impl": rate.get("class_name", "constant")
        if isinstance(rate, dict)
        else "constant",
        "loss": "SparseCategoricalCrossentropy(from_logits=True)",
        "recipe_notes": RECIPE_NOTES,
    }

"""What the Keras-based rungs (tf, tf-xla, keras, keras-xla, jax) share.

Each of them runs the zoo model as Keras 3 rebuilds it (keras_models.py, the eager
model's weights converted at startup) on one framework, called one way:

- `environment` sets KERAS_BACKEND and the framework's thread pools before it imports;
- `prepare` converts the model and places the input (NHWC, the framework's own tensor)
  outside the timed step, then asks the rung for its step (`compile_step`);
- `prepare_train` converts the same way and asks the rung for its training step
  (`compile_train`), with the run's optimizer and schedule rebuilt in Keras
  (keras_training.py); each batch is placed in the framework's layout as its copy;
- bf16 is Keras' mixed_bfloat16 policy (bf16 compute, float32 weights and logits);
- the record says which framework, which call, the layout, the precision asked for and
  the dtypes the built model computes in, and the thread counts the framework reports it
  actually uses.

A rung is one small subclass: its framework, its calls, and whether XLA compiles them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from stackcost.backends.base import Availability, Backend, Capabilities, Prepared, TrainPrepared
from stackcost.backends.keras_models import supports

if TYPE_CHECKING:
    import numpy as np

    from stackcost.cell import Cell

LAYOUT = "NHWC: the NCHW input transposed once, outside the timed step"
# The Keras dtype policy per precision: bf16 computes in bfloat16 over float32 weights.
POLICY = {"fp32": "float32", "bf16": "mixed_bfloat16"}


class KerasRung(Backend):
    """A Keras 3 model on `keras_backend`: TensorFlow's hooks here, JAX's in its rung."""

    keras_backend: ClassVar[str] = "tensorflow"
    jit: ClassVar[bool] = False  # XLA compiles the step
    capabilities = Capabilities(modes=frozenset({"infer", "train"}), precisions=frozenset(POLICY))
    torch_profiled = False  # the step runs in TensorFlow or XLA, not in aten ops

    def available(self) -> Availability:
        return Availability.needs_modules(
            "keras", "tensorflow", install="pip install 'stackcost[tf]'"
        )

    def why_not(self, cell: Cell) -> str | None:
        return supports(cell.model.name) or super().why_not(cell)

    def environment(self, cell: Cell) -> dict[str, str]:
        # Read by TensorFlow when its runtime starts (set again in-process, recorded).
        return {
            "KERAS_BACKEND": self.keras_backend,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_NUM_INTRAOP_THREADS": str(cell.threads),
            "TF_NUM_INTEROP_THREADS": "1",
        }

    def prepare(self, model, example, cell, ctx):
        from stackcost.backends.keras_models import images

        threads = self.pin_threads(cell)
        keras_model, convert_s = self._convert(model, example, cell)
        step, details = self.compile_step(keras_model, images(example), cell)
        return Prepared(step, {**details, **self._record(keras_model, cell, convert_s), **threads})

    def prepare_train(self, model, optimizer_factory, loss_fn, example, cell, ctx):
        from stackcost.backends.keras_training import cross_entropy, keras_optimizer, recipe

        threads = self.pin_threads(cell)
        keras_model, convert_s = self._convert(model, example, cell)
        optimizer = keras_optimizer(optimizer_factory)
        # loss_fn is torch's cross_entropy: the framework computes the same loss itself.
        prepared = self.compile_train(keras_model, optimizer, cross_entropy(), cell)
        prepared.details.update(
            {**recipe(optimizer), **self._record(keras_model, cell, convert_s), **threads}
        )
        return prepared

    def _convert(self, model: Any, example: Any, cell: Cell) -> tuple[Any, float]:
        """The Keras twin of `model` (its weights converted), and the seconds it took."""
        from stackcost.backends.keras_models import family, to_keras

        if len(example.tensors) != 1 or example.tensors[0].dim() != 4:
            raise RuntimeError(
                f"{self.name} runs image models (one NCHW input), not {cell.model.name}"
            )
        start = time.perf_counter()
        keras_model = to_keras(
            model,
            family(cell.model.name) or "",
            tuple(example.tensors[0].shape[1:]),
            POLICY[cell.precision],
        )
        return keras_model, time.perf_counter() - start

    def _record(self, keras_model: Any, cell: Cell, convert_s: float) -> dict[str, Any]:
        import keras

        from stackcost.backends.keras_models import precision_used

        return {
            "precision_requested": cell.precision,
            **precision_used(keras_model),
            "framework": self.keras_backend,
            "keras": keras.__version__,
            "keras_backend": keras.backend.backend(),
            "jit_compile": self.jit,
            "input_layout": LAYOUT,
            "weights": "converted from the eager model's state dict (OIHW->HWIO)",
            "convert_s": convert_s,
        }

    def pin_threads(self, cell: Cell) -> dict[str, Any]:
        """Set the framework's thread pools to the cell's count before its first op, and
        return what it reports using (TensorFlow here; the JAX rung overrides it)."""
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(cell.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        return {
            "tf_intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "tf_inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            # TensorFlow's oneDNN custom ops: on by default on x86 Linux.
            "tf_enable_onednn_opts": os.environ.get(
                "TF_ENABLE_ONEDNN_OPTS", "unset (TensorFlow's default: on, x86 Linux)"
            ),
            "tensorflow": tf.__version__,
        }

    def compile_step(
        self, keras_model: Any, x: np.ndarray, cell: Cell
    ) -> tuple[Callable[[], Any], dict[str, Any]]:
        """The rung's step over the placed input, and what to record about its call."""
        raise NotImplementedError

    def compile_train(
        self, keras_model: Any, optimizer: Any, loss: Any, cell: Cell
    ) -> TrainPrepared:
        """The rung's training step (forward, gradients, optimizer), its evaluation and
        its placement of a batch (backends.base.TrainPrepared), with what to record."""
        raise NotImplementedError

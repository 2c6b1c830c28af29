"""What the Keras-based rungs (tf, tf-xla, keras, keras-xla, jax) share.

Each of them runs the zoo model as Keras 3 rebuilds it (keras_models.py, the eager
model's weights converted at startup) on one framework, called one way:

- `environment` sets KERAS_BACKEND and the framework's thread pools before it imports;
- `prepare` converts the model and places the input (NHWC, the framework's own tensor)
  outside the timed step, then asks the rung for its step (`compile_step`);
- the record says which framework, which call, the layout, and the thread counts the
  framework reports it actually uses.

A rung is one small subclass: its framework, its call, and whether XLA compiles it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from stackcost.backends.base import Availability, Backend, Prepared
from stackcost.backends.keras_models import supports

if TYPE_CHECKING:
    import numpy as np

    from stackcost.cell import Cell

LAYOUT = "NHWC: the NCHW input transposed once, outside the timed step"


class KerasRung(Backend):
    """A Keras 3 model on `keras_backend`: TensorFlow's hooks here, JAX's in its rung."""

    keras_backend: ClassVar[str] = "tensorflow"
    jit: ClassVar[bool] = False  # XLA compiles the step
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
        from stackcost.backends.keras_models import nhwc, to_keras

        if len(example.tensors) != 1 or example.tensors[0].dim() != 4:
            raise RuntimeError(
                f"{self.name} runs image models (one NCHW input), not {cell.model.name}"
            )
        threads = self.pin_threads(cell)
        x = example.tensors[0].detach().cpu().float().numpy()
        start = time.perf_counter()
        keras_model = to_keras(model, tuple(x.shape[1:]))
        convert_s = time.perf_counter() - start
        step, details = self.compile_step(keras_model, nhwc(x), cell)
        import keras

        details.update(
            {
                "framework": self.keras_backend,
                "keras": keras.__version__,
                "keras_backend": keras.backend.backend(),
                "jit_compile": self.jit,
                "input_layout": LAYOUT,
                "weights": "converted from the eager model's state dict (OIHW->HWIO)",
                "convert_s": convert_s,
                **threads,
            }
        )
        return Prepared(step, details)

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

"""JAX: XLA through `jax.jit`, the Keras 3 model on the JAX backend.

Keras on JAX is stateless underneath: `stateless_call(trainable, non_trainable, x)` is a
pure function of the weights and the input, which `jax.jit` traces and XLA compiles on
the first call. The weights are passed as arguments (not baked in as constants), as a
JAX user's inference function takes its parameters.

XLA's CPU client sizes its thread pool by the CPUs the process may use, so the cell's
thread count is applied as CPU affinity before JAX imports (keras_common.py).
"""

from __future__ import annotations

from stackcost.backends.keras_common import KerasRung


class JaxBackend(KerasRung):
    name = "jax"
    description = "XLA via jax.jit: Keras 3 model on the JAX backend (stateless_call)"
    keras_backend = "jax"
    jit = True

    def compile_step(self, keras_model, x, cell):
        import jax
        import numpy as np

        trainable = [v.value for v in keras_model.trainable_variables]
        non_trainable = [v.value for v in keras_model.non_trainable_variables]

        @jax.jit
        def forward(trainable, non_trainable, t):
            y, _ = keras_model.stateless_call(trainable, non_trainable, t, training=False)
            return y

        placed = jax.device_put(x)

        def step():
            return np.asarray(forward(trainable, non_trainable, placed))  # waits for it

        return step, {"call": "jax.jit(model.stateless_call)", "via": "Keras 3 on JAX"}

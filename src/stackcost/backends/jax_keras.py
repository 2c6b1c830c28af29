"""JAX: XLA through `jax.jit`, the Keras 3 model on the JAX backend.

Keras on JAX is stateless underneath: `stateless_call(trainable, non_trainable, x)` is a
pure function of the weights and the input, which `jax.jit` traces and XLA compiles on
the first call. The weights are passed as arguments (not baked in as constants), as a
JAX user's inference function takes its parameters.

XLA's CPU client sizes its thread pool by the CPUs the process may use, so the cell's
thread count is applied as CPU affinity before JAX imports (pin_threads).

A cuda cell runs on JAX's CUDA plugin (`JAX_PLATFORMS=cuda`: no silent fall back to the
CPU), without XLA's preallocation of 75% of the card, so the device memory recorded is
what the cell used. Not yet run on a GPU.

Training is the loop of Keras' guide to training in JAX: `jax.value_and_grad` of the
stateless forward and loss, then `optimizer.stateless_apply`, jitted as one step over the
whole state (weights, BatchNorm statistics, optimizer slots), which the step donates.
"""

from __future__ import annotations

import os

from stackcost.backends.base import Availability, Capabilities, TrainPrepared
from stackcost.backends.keras_common import POLICY, KerasRung


class JaxBackend(KerasRung):
    name = "jax"
    description = "XLA via jax.jit: Keras 3 model on the JAX backend (stateless_call)"
    keras_backend = "jax"
    jit = True
    capabilities = Capabilities(
        modes=frozenset({"infer", "train"}),
        devices=frozenset({"cpu", "cuda"}),
        precisions=frozenset(POLICY),
    )

    def available(self):
        return Availability.needs_modules("keras", "jax", install="pip install 'stackcost[jax]'")

    def environment(self, cell):
        env = {
            "KERAS_BACKEND": self.keras_backend,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            # The cell's device, not whichever platform JAX finds first.
            "JAX_PLATFORMS": "cuda" if cell.device == "cuda" else "cpu",
        }
        if cell.device == "cuda":
            env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        if cell.threads == 1:
            # XLA's CPU client has no thread-count flag beyond single-threaded Eigen; for
            # more threads it uses the CPUs this process may run on (pin_threads).
            env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        return env

    def pin_threads(self, cell):
        # XLA's CPU thread pool is as wide as the CPUs this process may use: narrow them.
        allowed = sorted(os.sched_getaffinity(0))
        if cell.threads < len(allowed):
            os.sched_setaffinity(0, allowed[: cell.threads])
        import jax

        return {
            "xla_cpu_threads": len(os.sched_getaffinity(0)),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "jax": jax.__version__,
            "jax_device": str(jax.devices()[0]),
        }

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

    def compile_train(self, keras_model, optimizer, loss, cell):
        import jax

        from stackcost.backends.keras_models import images
        from stackcost.backends.keras_training import to_torch

        optimizer.build(keras_model.trainable_variables)

        def loss_and_updates(trainable, non_trainable, x, y):
            logits, non_trainable = keras_model.stateless_call(
                trainable, non_trainable, x, training=True
            )
            return loss(y, logits), (logits, non_trainable)

        gradients = jax.value_and_grad(loss_and_updates, has_aux=True)

        def train(state, x, y):
            trainable, non_trainable, slots = state
            (value, (logits, non_trainable)), grads = gradients(trainable, non_trainable, x, y)
            trainable, slots = optimizer.stateless_apply(slots, grads, trainable)
            return value, logits, (trainable, non_trainable, slots)

        train = jax.jit(train, donate_argnums=0)  # the old state is not read again

        @jax.jit
        def forward(trainable, non_trainable, x):
            return keras_model.stateless_call(trainable, non_trainable, x, training=False)[0]

        state = [
            tuple(
                [v.value for v in variables]
                for variables in (
                    keras_model.trainable_variables,
                    keras_model.non_trainable_variables,
                    optimizer.variables,
                )
            )
        ]

        def step(x, y):
            value, logits, state[0] = train(state[0], x, y)
            return float(value), to_torch(logits)  # both wait for the step

        def evaluate(x):
            trainable, non_trainable, _ = state[0]
            return to_torch(forward(trainable, non_trainable, x))

        return TrainPrepared(
            step,
            {
                "call": "jax.jit(value_and_grad(stateless_call) + optimizer.stateless_apply)",
                "via": "Keras 3 on JAX",
                "state_donated": True,
            },
            evaluate=evaluate,
            place=lambda x, y: (jax.device_put(images(x)), jax.device_put(y.numpy())),
        )

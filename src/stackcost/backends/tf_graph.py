"""TensorFlow: the Keras 3 model traced into a graph by `tf.function`, with or without XLA.

`tf` is the graph TensorFlow's runtime executes op by op (oneDNN kernels on x86); `tf-xla`
is the same function with `jit_compile=True`, so XLA fuses and compiles it on the first
call (counted in the cold call, as Inductor's compile is).
"""

from __future__ import annotations

from stackcost.backends.keras_common import KerasRung


class TFBackend(KerasRung):
    name = "tf"
    description = "Keras 3 model as a TensorFlow graph (tf.function, no XLA)"

    def compile_step(self, keras_model, x, cell):
        import tensorflow as tf

        graph = tf.function(lambda t: keras_model(t, training=False), jit_compile=self.jit)
        placed = tf.constant(x)

        def step():
            return graph(placed).numpy()  # .numpy() waits for the result

        return step, {"call": "tf.function(model(x, training=False))"}


class TFXLABackend(TFBackend):
    name = "tf-xla"
    description = "Keras 3 model as a TensorFlow graph compiled by XLA (jit_compile=True)"
    jit = True

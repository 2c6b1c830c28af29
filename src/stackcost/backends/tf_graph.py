"""TensorFlow: the Keras 3 model traced into a graph by `tf.function`, with or without XLA.

`tf` is the graph TensorFlow's runtime executes op by op (oneDNN kernels on x86); `tf-xla`
is the same function with `jit_compile=True`, so XLA fuses and compiles it on the first
call (counted in the cold call, as Inductor's compile is).

Training is the loop a TensorFlow user writes: a `tf.function` (with or without XLA) that
records the forward on a GradientTape and applies the gradients with the optimizer.
"""

from __future__ import annotations

from stackcost.backends.base import TrainPrepared
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

    def compile_train(self, keras_model, optimizer, loss, cell):
        import tensorflow as tf

        from stackcost.backends.keras_models import images
        from stackcost.backends.keras_training import to_torch

        weights = keras_model.trainable_weights

        @tf.function(jit_compile=self.jit)
        def train(x, y):
            with tf.GradientTape() as tape:
                logits = keras_model(x, training=True)
                value = loss(y, logits)
            optimizer.apply(tape.gradient(value, weights), weights)
            return value, logits

        forward = tf.function(lambda t: keras_model(t, training=False), jit_compile=self.jit)

        def step(x, y):
            value, logits = train(x, y)
            return value.numpy(), to_torch(logits)  # .numpy() waits for the step

        return TrainPrepared(
            step,
            {"call": "tf.function(GradientTape + optimizer.apply)"},
            evaluate=lambda x: to_torch(forward(x)),
            place=lambda x, y: (tf.constant(images(x)), tf.constant(y.numpy())),
        )


class TFXLABackend(TFBackend):
    name = "tf-xla"
    description = "Keras 3 model as a TensorFlow graph compiled by XLA (jit_compile=True)"
    jit = True

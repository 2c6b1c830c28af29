"""Keras 3 on TensorFlow, called the way a user calls it: `predict_on_batch` by default,
or `__call__` (option `call`); `keras-xla` compiles it with `jit_compile=True`.

`predict_on_batch` takes the NHWC numpy batch and converts it on every call, as a user's
code would; `__call__` gets a tensor placed once. The model is compiled with `jit_compile`
set explicitly: Keras' default, "auto", turns XLA on wherever it can.

Training calls `train_on_batch` on the model compiled with the run's optimizer and loss,
the per-batch form of `fit`; its accuracy metric (this batch's, reset every call) gives
the correct count, so no second forward is run for it.
"""

from __future__ import annotations

from stackcost.backends.base import Option, TrainPrepared
from stackcost.backends.keras_common import KerasRung

CALLS = ("predict_on_batch", "__call__")


class KerasBackend(KerasRung):
    name = "keras"
    description = "Keras 3 on TensorFlow, predict_on_batch (or __call__), no XLA"
    options = {"call": Option(CALLS[0], CALLS)}

    def compile_step(self, keras_model, x, cell):
        import keras

        keras_model.compile(jit_compile=self.jit)
        call = self.option(cell, "call")
        if call == "predict_on_batch":

            def step():
                return keras_model.predict_on_batch(x)

        else:
            placed = keras.ops.convert_to_tensor(x)

            def step():
                return keras.ops.convert_to_numpy(keras_model(placed, training=False))

        return step, {"call": call, "jit_compile_used": bool(keras_model.jit_compile)}

    def compile_train(self, keras_model, optimizer, loss, cell):
        import keras

        from stackcost.backends.keras_models import images
        from stackcost.backends.keras_training import to_torch

        accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        keras_model.compile(
            optimizer=optimizer, loss=loss, metrics=[accuracy], jit_compile=self.jit
        )

        def step(x, y):
            logs = keras_model.train_on_batch(x, y, return_dict=True)
            return logs["loss"], round(float(logs["accuracy"]) * len(y))

        if self.option(cell, "call") == "predict_on_batch":
            forward = keras_model.predict_on_batch
        else:

            def forward(x):
                return keras_model(keras.ops.convert_to_tensor(x), training=False)

        return TrainPrepared(
            step,
            {
                "call": "train_on_batch",
                "eval_call": self.option(cell, "call"),
                "jit_compile_used": bool(keras_model.jit_compile),
            },
            evaluate=lambda x: to_torch(forward(x)),
            # NHWC numpy batches, as a user's code hands them to train_on_batch.
            place=lambda x, y: (images(x), y.numpy()),
        )


class KerasXLABackend(KerasBackend):
    name = "keras-xla"
    description = "Keras 3 on TensorFlow, predict_on_batch (or __call__), XLA (jit_compile=True)"
    jit = True

"""The zoo's CNNs in Keras 3, carrying the torch model's own weights.

One definition serves every Keras-based rung (tf, tf-xla, keras, keras-xla, jax): Keras 3
runs it on TensorFlow or on JAX, whichever KERAS_BACKEND the worker set before import.
The model is built from the torch module it mirrors, layer for layer, so the weights are
the eager model's, converted once at the rung's startup (never in the timed step):

- convolutions OIHW -> HWIO, dense layers (out, in) -> (in, out);
- BatchNorm with its running mean, variance and epsilon (inference mode);
- layout NHWC, the CPU-natural layout of both frameworks; the first dense layer after a
  flatten gets its inputs permuted from torch's C*H*W order to H*W*C;
- torch pads convolutions symmetrically, Keras' "same" pads the extra row at the end for
  stride 2: every padded layer is an explicit ZeroPadding2D then "valid".

Which models it mirrors follows from the zoo: a model whose Workload names a family built
here (FAMILIES) is mirrored, every depth of it; any other is `unsupported` on these rungs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from torch import nn


def family(model_name: str) -> str | None:
    """The zoo family of `model_name` (None for a user's factory or an unfamilied entry)."""
    from stackcost.zoo import MODELS

    entry = MODELS.get(model_name)
    return entry.family if entry else None


def supports(model_name: str) -> str | None:
    """Why `model_name` has no Keras definition, or None when it has one."""
    from stackcost.zoo import MODELS

    if family(model_name) in FAMILIES:
        return None
    defined = [name for name in MODELS if family(name) in FAMILIES]
    return f"no Keras definition of {model_name} (defined: {', '.join(defined)})"


def to_keras(
    model: nn.Module, model_family: str, image_shape: tuple[int, int, int], policy: str = "float32"
) -> Any:
    """A keras.Model computing what `model` (of the zoo family `model_family`) computes, on
    NHWC input of `image_shape` (C, H, W as the torch model takes it), with its weights.

    `policy` is the Keras dtype policy its layers are built with: "mixed_bfloat16"
    computes in bf16 over float32 weights; the output is cast back to float32 (Keras'
    advice for the last layer), so every rung hands back fp32 logits."""
    import keras

    if model_family not in FAMILIES:
        raise TypeError(f"no Keras definition of the family {model_family}")
    c, h, w = image_shape
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)  # the layers built below take it
    try:
        inputs = keras.Input(shape=(h, w, c), name="input")
        outputs = FAMILIES[model_family](model, inputs, image_shape)
        if policy != "float32":
            outputs = keras.layers.Activation("linear", dtype="float32")(outputs)
    finally:
        keras.config.set_dtype_policy(previous)
    return keras.Model(inputs, outputs, name=type(model).__name__.lower())


def precision_used(keras_model: Any) -> dict[str, Any]:
    """What the built model computes in: its layers' dtype policies and compute dtypes
    (those holding weights), and the dtype of its weights."""
    layers = [layer for layer in keras_model.layers if layer.weights]
    return {
        "dtype_policy": sorted({layer.dtype_policy.name for layer in layers}),
        "compute_dtype": sorted({layer.compute_dtype for layer in layers}),
        "variable_dtype": sorted({v.dtype for v in keras_model.weights}),
    }


def nhwc(x: np.ndarray) -> np.ndarray:
    """An NCHW batch in the frameworks' natural CPU layout (a contiguous copy)."""
    import numpy as np

    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def images(x: Any) -> np.ndarray:
    """The NHWC numpy batch of an Example holding one NCHW image tensor (a copy: what
    every Keras-based rung feeds its framework)."""
    return nhwc(x.tensors[0].detach().cpu().float().numpy())


# -- layers with converted weights -----------------------------------------------------


def _numpy(t: Any) -> np.ndarray:
    # A copy: JAX on CPU may alias a numpy buffer, and this one is the torch parameter.
    return t.detach().cpu().float().numpy().copy()


def _conv(x: Any, conv: nn.Conv2d) -> Any:
    import keras

    pad = conv.padding[0]
    if pad:
        x = keras.layers.ZeroPadding2D(pad)(x)
    layer = keras.layers.Conv2D(
        conv.out_channels,
        conv.kernel_size,
        strides=conv.stride,
        padding="valid",
        use_bias=conv.bias is not None,
    )
    y = layer(x)
    weights = [_numpy(conv.weight).transpose(2, 3, 1, 0)]  # OIHW -> HWIO
    if conv.bias is not None:
        weights.append(_numpy(conv.bias))
    layer.set_weights(weights)
    return y


def _bn(x: Any, bn: nn.BatchNorm2d) -> Any:
    import keras

    # torch's momentum weighs the new batch, Keras' the running value.
    layer = keras.layers.BatchNormalization(epsilon=bn.eps, momentum=1.0 - (bn.momentum or 0.1))
    y = layer(x)
    layer.set_weights(
        [_numpy(bn.weight), _numpy(bn.bias), _numpy(bn.running_mean), _numpy(bn.running_var)]
    )
    return y


def _dense(x: Any, linear: nn.Linear, chw: tuple[int, int, int] | None = None) -> Any:
    """A dense layer; `chw` when its input is a flattened feature map (torch's order)."""
    import keras

    layer = keras.layers.Dense(linear.out_features, use_bias=linear.bias is not None)
    y = layer(x)
    weight = _numpy(linear.weight)  # (out, in)
    if chw is not None:
        c, h, w = chw
        weight = weight.reshape(-1, c, h, w).transpose(0, 2, 3, 1).reshape(weight.shape[0], -1)
    weights = [weight.T]
    if linear.bias is not None:
        weights.append(_numpy(linear.bias))
    layer.set_weights(weights)
    return y


def _relu(x: Any) -> Any:
    import keras

    return keras.layers.ReLU()(x)


# -- the architectures -------------------------------------------------------------------


def _block(x: Any, block: nn.Module) -> Any:
    """A BasicBlock or Bottleneck (stackcost/zoo/resnet.py), same order of operations."""
    import keras

    identity = x
    if block.downsample is not None:
        identity = _bn(_conv(x, block.downsample[0]), block.downsample[1])
    convs = [block.conv1, block.conv2] + ([block.conv3] if hasattr(block, "conv3") else [])
    bns = [block.bn1, block.bn2] + ([block.bn3] if hasattr(block, "bn3") else [])
    out = x
    for i, (conv, bn) in enumerate(zip(convs, bns, strict=True)):
        out = _bn(_conv(out, conv), bn)
        if i < len(convs) - 1:
            out = _relu(out)
    return _relu(keras.layers.Add()([out, identity]))


def _resnet(model: nn.Module, x: Any, image_shape: tuple[int, int, int]) -> Any:
    import keras

    x = _relu(_bn(_conv(x, model.conv1), model.bn1))
    # Max pooling with padding 1: zeros pad as torch's -inf would, since x >= 0 after ReLU.
    x = keras.layers.MaxPooling2D(3, strides=2)(keras.layers.ZeroPadding2D(1)(x))
    for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
        for block in stage:
            x = _block(x, block)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return _dense(x, model.fc)


def _mnist_cnn(model: nn.Module, x: Any, image_shape: tuple[int, int, int]) -> Any:
    import keras

    x = _relu(keras.layers.MaxPooling2D(2)(_conv(x, model.conv1)))
    x = _conv(x, model.conv2)
    x = keras.layers.SpatialDropout2D(model.conv2_drop.p)(x)  # inactive at inference
    x = _relu(keras.layers.MaxPooling2D(2)(x))
    _, h, w, c = x.shape
    x = keras.layers.Flatten()(x)
    x = _relu(_dense(x, model.fc1, chw=(c, h, w)))
    x = keras.layers.Dropout(model.fc1_drop.p)(x)
    return keras.layers.Activation("log_softmax")(_dense(x, model.fc2))


def _mlp(model: nn.Module, x: Any, image_shape: tuple[int, int, int]) -> Any:
    import keras
    from torch import nn

    x = keras.layers.Flatten()(x)
    first = True
    for layer in model.layers:
        if isinstance(layer, nn.Linear):
            x = _dense(x, layer, chw=image_shape if first else None)
            first = False
        elif isinstance(layer, nn.ReLU):
            x = _relu(x)
    return x


# The zoo families mirrored here, by Workload.family (their torch code is in stackcost/zoo/):
# each builds the Keras graph of a torch module of the family, on a Keras input.
FAMILIES: dict[str, Callable[[nn.Module, Any, tuple[int, int, int]], Any]] = {
    "resnet": _resnet,
    "mnist-cnn": _mnist_cnn,
    "mlp": _mlp,
}

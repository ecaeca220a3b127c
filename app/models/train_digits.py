"""Train the embedded default model: a small CNN on scikit-learn's 8x8 handwritten digits.

    python -m aipu.app.models.train_digits        (needs the `train` extra: scikit-learn)

Writes ``digits_cnn.onnx`` (float Conv/Relu/GlobalAveragePool/Flatten/Gemm graph) and
``digits_data.npz`` (a calibration batch from the training split, the training split itself and the held-out
evaluation split, as float32 images in [0, 1] with labels) next to this file. The training split is there so that
methods that fine-tune (pruning, structured matrices) can without scikit-learn. Training is plain numpy (Adam, cross
entropy), deterministic for a given seed, and takes a few minutes on one core; the demo and the
codec benchmark use the result as real trained weights.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
MODEL_PATH = HERE / "digits_cnn.onnx"
DATA_PATH = HERE / "digits_data.npz"

# (name, out_channels, in_channels, kernel, stride, pad)
CONV_LAYERS = (("conv1", 16, 1, 3, 1, 1), ("conv2", 32, 16, 3, 2, 1), ("conv3", 32, 32, 3, 1, 1))
CLASSES = 10


def conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Dense 2-D convolution (NCHW), one einsum per kernel tap."""
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (xp.shape[2] - k) // stride + 1
    ow = (xp.shape[3] - k) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += np.einsum("kc,nchw->nkhw", w[:, :, i, j], patch, optimize=True)
    return out + b.reshape(1, -1, 1, 1)


def conv_backward(x: np.ndarray, w: np.ndarray, grad_out: np.ndarray, stride: int, pad: int):
    """Gradients of conv_forward with respect to x, w and b."""
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    grad_xp = np.zeros_like(xp)
    grad_w = np.zeros_like(w)
    oh, ow = grad_out.shape[2:]
    for i in range(k):
        for j in range(k):
            rows = slice(i, i + stride * (oh - 1) + 1, stride)
            cols = slice(j, j + stride * (ow - 1) + 1, stride)
            grad_w[:, :, i, j] = np.einsum("nkhw,nchw->kc", grad_out, xp[:, :, rows, cols], optimize=True)
            grad_xp[:, :, rows, cols] += np.einsum("kc,nkhw->nchw", w[:, :, i, j], grad_out, optimize=True)
    grad_x = grad_xp[:, :, pad:pad + x.shape[2], pad:pad + x.shape[3]]
    return grad_x, grad_w, grad_out.sum(axis=(0, 2, 3))


def forward(params: dict, x: np.ndarray, keep: bool = False):
    """Logits of the CNN; with keep=True also the activations the backward pass needs."""
    cache = []
    for name, _, _, _, stride, pad in CONV_LAYERS:
        pre = conv_forward(x, params[name + ".weight"], params[name + ".bias"], stride, pad)
        cache.append((x, pre))
        x = np.maximum(pre, 0.0)
    pooled = x.mean(axis=(2, 3))
    logits = pooled @ params["fc.weight"].T + params["fc.bias"]
    return (logits, cache, x, pooled) if keep else logits


def loss_and_grads(params: dict, x: np.ndarray, labels: np.ndarray):
    logits, cache, last, pooled = forward(params, x, keep=True)
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = float(-np.log(probs[np.arange(n), labels] + 1e-12).mean())
    grad_logits = probs
    grad_logits[np.arange(n), labels] -= 1.0
    grad_logits /= n
    grads = {"fc.weight": grad_logits.T @ pooled, "fc.bias": grad_logits.sum(axis=0)}
    grad = (grad_logits @ params["fc.weight"])[:, :, None, None] / (last.shape[2] * last.shape[3])
    grad = np.broadcast_to(grad, last.shape).copy()
    for (name, _, _, _, stride, pad), (inp, pre) in zip(reversed(CONV_LAYERS), reversed(cache)):
        grad = grad * (pre > 0)
        grad, grads[name + ".weight"], grads[name + ".bias"] = conv_backward(inp, params[name + ".weight"],
                                                                              grad, stride, pad)
    return loss, grads


def init_params(rng: np.random.Generator) -> dict:
    params = {}
    for name, out_c, in_c, k, _, _ in CONV_LAYERS:
        params[name + ".weight"] = rng.normal(0.0, np.sqrt(2.0 / (in_c * k * k)), (out_c, in_c, k, k))
        params[name + ".bias"] = np.zeros(out_c)
    params["fc.weight"] = rng.normal(0.0, np.sqrt(1.0 / CONV_LAYERS[-1][1]), (CLASSES, CONV_LAYERS[-1][1]))
    params["fc.bias"] = np.zeros(CLASSES)
    return params


class Adam:
    """Adam's update of a parameter dict in place (beta 0.9 and 0.999), one call per batch."""

    def __init__(self, params: dict, lr: float):
        self.lr, self.step_count = lr, 0
        self.moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}

    def step(self, params: dict, grads: dict) -> None:
        self.step_count += 1
        for key, grad in grads.items():
            m, v = self.moments[key]
            m[...] = 0.9 * m + 0.1 * grad
            v[...] = 0.999 * v + 0.001 * grad * grad
            params[key] -= self.lr * (m / (1 - 0.9 ** self.step_count)) / (
                np.sqrt(v / (1 - 0.999 ** self.step_count)) + 1e-8)


def batches(count: int, batch: int, rng: np.random.Generator):
    """The index arrays of one epoch over ``count`` samples in a random order."""
    order = rng.permutation(count)
    return [order[start:start + batch] for start in range(0, count, batch)]


def train(images: np.ndarray, labels: np.ndarray, *, epochs: int, seed: int, lr: float = 3e-3,
          batch: int = 64) -> dict:
    """Adam on the cross-entropy loss."""
    rng = np.random.default_rng(seed)
    params = init_params(rng)
    optimizer = Adam(params, lr)
    for epoch in range(epochs):
        for idx in batches(len(images), batch, rng):
            _, grads = loss_and_grads(params, images[idx], labels[idx])
            optimizer.step(params, grads)
    return params


def sklearn_split(seed: int = 2021):
    """scikit-learn's digits as (train images, train labels, held-out images, held-out labels): the split the
    embedded model was trained on. Needs the `train` extra; ``stored_split`` reads the same from the package."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float64)[:, None]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(images))
    test, trainset = order[:360], order[360:]
    return images[trainset], labels[trainset], images[test], labels[test]


def stored_split():
    """The training and held-out splits as ``digits_data.npz`` carries them (float64 images, int64 labels)."""
    with np.load(DATA_PATH) as data:
        return (data["train_images"].astype(np.float64), data["train_labels"],
                data["eval_images"].astype(np.float64), data["eval_labels"])


def to_onnx(params: dict) -> onnx.ModelProto:
    nodes, inits, current = [], [], "image"
    for name, _, _, k, stride, pad in CONV_LAYERS:
        for suffix in ("weight", "bias"):
            inits.append(numpy_helper.from_array(params[f"{name}.{suffix}"].astype(np.float32), f"{name}.{suffix}"))
        nodes.append(helper.make_node("Conv", [current, f"{name}.weight", f"{name}.bias"], [name], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4))
        nodes.append(helper.make_node("Relu", [name], [name + ".relu"], name=name + ".relu"))
        current = name + ".relu"
    inits += [numpy_helper.from_array(params[f"fc.{s}"].astype(np.float32), f"fc.{s}") for s in ("weight", "bias")]
    nodes += [helper.make_node("GlobalAveragePool", [current], ["pool"], name="pool"),
              helper.make_node("Flatten", ["pool"], ["features"], name="flatten"),
              helper.make_node("Gemm", ["features", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "digits_cnn",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="aipu.train_digits")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=2021)
    args = parser.parse_args(argv)
    train_images, train_labels, test_images, test_labels = sklearn_split(args.seed)
    params = train(train_images, train_labels, epochs=args.epochs, seed=args.seed)
    train_acc = float((forward(params, train_images).argmax(1) == train_labels).mean())
    test_acc = float((forward(params, test_images).argmax(1) == test_labels).mean())
    onnx.save(to_onnx(params), MODEL_PATH)
    np.savez_compressed(DATA_PATH, calibration_images=train_images[:128].astype(np.float32),
                        eval_images=test_images.astype(np.float32), eval_labels=test_labels.astype(np.int64),
                        train_images=train_images.astype(np.float32), train_labels=train_labels.astype(np.int64))
    print(f"train accuracy {train_acc:.4f}, held-out accuracy {test_acc:.4f}; wrote {MODEL_PATH.name}, {DATA_PATH.name}")


if __name__ == "__main__":
    main()

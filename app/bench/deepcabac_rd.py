"""DeepCABAC's quantizers on the demo digits model: top-1 against bits per weight (docs/deepcabac-quantizer.md).

The four weight tensors of ``digits_cnn.onnx`` are quantized and coded by ``encode_layer`` (default options); the
biases stay float in every row. Methods:

* ``uniform``: one step per layer, Δ = max|w| / M, the same M for every layer (each M of ``MAX_LEVELS``),
  plain rounding;
* ``mse_rdoq``: the same steps, RDOQ with σ = 1 and λ = α·Δ² per layer, for each α of ``ALPHAS``;
* ``relevance_rdoq``: the same, σ from the diagonal Fisher information on the model's 128 calibration images
  (codec.deepcabac.relevance), each layer's 1/σ² divided by its median so that a weight of typical relevance
  weighs its error as in MSE-RDOQ;
* ``mse_allocation``: each layer's step chosen by rate-distortion (codec.deepcabac.allocation) with one λ for
  the model and plain squared error, plain rounding; every allocation along λ;
* ``relevance_allocation``: the RD quantizer: the same with the Fisher σ unnormalised, so that the distortion
  estimates the loss increase and λ prices a bit in loss.

Each point: the payload bits (plus 32 per layer for Δ) over the weights, top-1 and the mean cross entropy on the
360 held-out images. ``best_top1`` gives each method's best top-1 within each budget of ``BUDGETS``.
With ``plot`` the fronts go to a PNG.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

MAX_LEVELS = (3, 3.5, 4, 5, 6, 7, 8, 10, 12, 16)
ALPHAS = (0.01, 0.03, 0.1)
BUDGETS = (1.5, 2.0, 2.5, 3.0, 3.5)
PLOT_PATH = Path(__file__).resolve().parents[2] / "docs" / "images" / "deepcabac-rd.png"
METHODS = ("uniform", "mse_rdoq", "relevance_rdoq", "mse_allocation", "relevance_allocation")


def demo_model() -> tuple[dict, dict]:
    """The demo model's float64 parameters and its data (calibration images, held-out images and labels)."""
    import onnx
    from onnx import numpy_helper

    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH

    params = {tensor.name: numpy_helper.to_array(tensor).astype(np.float64)
              for tensor in onnx.load(MODEL_PATH).graph.initializer}
    data = {name: array.astype(np.float64) if array.dtype.kind == "f" else array
            for name, array in np.load(DATA_PATH).items()}
    return params, data


def fisher_samples(params: dict, images: np.ndarray, names: list[str]):
    """(p(y | x), gradient of −log p(y | x) for the tensors ``names``) for every image x and class y: the
    samples of the model's own Fisher information (codec.deepcabac.relevance.diagonal_fisher)."""
    from aipu.app.models.train_digits import CLASSES, forward, loss_and_grads

    for image in images[:, None]:
        logits = forward(params, image)[0]
        probabilities = np.exp(logits - logits.max())
        probabilities /= probabilities.sum()
        for label in range(CLASSES):
            _, gradients = loss_and_grads(params, image, np.array([label]))
            yield float(probabilities[label]), {name: gradients[name] for name in names}


def evaluate(params: dict, data: dict) -> tuple[float, float]:
    """Top-1 and mean cross entropy (nats) on the held-out images."""
    from aipu.app.models.train_digits import forward

    logits = forward(params, data["eval_images"])
    labels = data["eval_labels"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float((logits.argmax(axis=1) == labels).mean()), float(-log_probabilities[np.arange(len(labels)),
                                                                                      labels].mean())


def median_normalised_sigma(sigma: np.ndarray) -> np.ndarray:
    """σ rescaled so that the median of the layer's 1/σ² is 1."""
    precision = 1.0 / np.square(sigma)
    return 1.0 / np.sqrt(precision / np.median(precision))


def quantized_point(params: dict, data: dict, sigmas: dict | None, max_level: float, alpha: float) -> dict:
    """Quantize and code every weight tensor at one operating point; its rate and accuracy."""
    from aipu.codec.deepcabac import decode_layer, encode_layer
    from aipu.codec.deepcabac.allocation import STEP_BITS
    from aipu.codec.deepcabac.rdoq import layer_step, rdoq_layer, uniform_levels

    quantized, bits, count = dict(params), 0, 0
    for name in weight_names(params):
        weights = params[name]
        step = layer_step(weights, max_level)
        levels = (uniform_levels(weights, step) if sigmas is None
                  else rdoq_layer(weights, step, alpha * step * step, sigmas[name]).levels)
        payload = encode_layer(levels)
        quantized[name] = decode_layer(payload, weights.shape).astype(np.float64) * step
        bits += 8 * len(payload) + STEP_BITS
        count += weights.size
    top1, cross_entropy = evaluate(quantized, data)
    return {"max_level": max_level, "alpha": alpha, "bits_per_weight": round(bits / count, 4),
            "top1": round(top1, 4), "cross_entropy": round(cross_entropy, 4)}


def weight_names(params: dict) -> list[str]:
    return [name for name in params if name.endswith(".weight")]


def front(points: list[dict]) -> list[dict]:
    """The points no other point beats on both bits (fewer) and top-1 (higher), by rate."""
    kept = []
    for point in sorted(points, key=lambda p: (p["bits_per_weight"], -p["top1"])):
        if not kept or point["top1"] > kept[-1]["top1"]:
            kept.append(point)
    return kept


def fisher_sigmas(params: dict, data: dict) -> dict:
    """σ = 1/sqrt(F + ε) of every weight tensor, F the diagonal Fisher on the calibration images."""
    from aipu.codec.deepcabac.relevance import diagonal_fisher, fisher_relevance

    names = weight_names(params)
    fisher = diagonal_fisher(fisher_samples(params, data["calibration_images"], names))
    return {name: relevance.sigma for name, relevance in
            fisher_relevance({name: params[name] for name in names}, fisher).items()}


def allocation_points(params: dict, data: dict, sigmas: dict | None) -> list[dict]:
    """One point per allocation along λ: every layer's step of least D + λR (codec.deepcabac.allocation)."""
    from aipu.codec.deepcabac.allocation import allocate, breakpoints, step_choices

    names = weight_names(params)
    count = sum(params[name].size for name in names)
    choices = {name: step_choices(params[name], None if sigmas is None else sigmas[name]) for name in names}
    slopes = breakpoints(choices)
    lambdas = [slopes[0] / 2, *(np.sqrt(np.multiply(slopes[:-1], slopes[1:]))), slopes[-1] * 2] if slopes else [0.0]
    points = []
    for lam in lambdas:
        chosen = allocate(choices, float(lam))
        quantized = dict(params, **{name: choice.levels * choice.step for name, choice in chosen.items()})
        top1, cross_entropy = evaluate(quantized, data)
        points.append({"lambda": float(lam), "max_level": {name: round(float(np.max(np.abs(params[name])))
                                                                      / choice.step, 2)
                                                           for name, choice in chosen.items()},
                       "bits_per_weight": round(sum(choice.bits for choice in chosen.values()) / count, 4),
                       "top1": round(top1, 4), "cross_entropy": round(cross_entropy, 4)})
    return points


def run(plot: bool = False) -> dict:
    params, data = demo_model()
    float_top1, float_cross_entropy = evaluate(params, data)
    names = weight_names(params)
    fisher = fisher_sigmas(params, data)
    rdoq_sigmas = {"mse_rdoq": {name: np.ones_like(params[name]) for name in names},
                   "relevance_rdoq": {name: median_normalised_sigma(fisher[name]) for name in names}}
    points = {"uniform": [quantized_point(params, data, None, level, 0.0) for level in MAX_LEVELS]}
    for method, sigmas in rdoq_sigmas.items():
        points[method] = [quantized_point(params, data, sigmas, level, alpha)
                          for alpha in ALPHAS for level in MAX_LEVELS]
    points["mse_allocation"] = allocation_points(params, data, None)
    points["relevance_allocation"] = allocation_points(params, data, fisher)
    best = {method: {str(budget): max((p["top1"] for p in rows if p["bits_per_weight"] <= budget), default=None)
                     for budget in BUDGETS} for method, rows in points.items()}
    if plot:
        plot_fronts(points, float_top1, PLOT_PATH)
    return {"weights": sum(params[name].size for name in names),
            "float_top1": round(float_top1, 4), "float_cross_entropy": round(float_cross_entropy, 4),
            "points": points, "fronts": {method: front(rows) for method, rows in points.items()},
            "best_top1": best}


def plot_fronts(points: dict, float_top1: float, path: Path) -> None:
    """Every point faintly and each method's front as a line, top-1 against bits per weight."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0))
    axes = figure.add_subplot()
    for method, colour in zip(METHODS, ("tab:gray", "tab:blue", "tab:orange", "tab:green", "tab:red")):
        rows = points[method]
        axes.scatter([p["bits_per_weight"] for p in rows], [100 * p["top1"] for p in rows], s=8, alpha=0.3,
                     color=colour)
        best = front(rows)
        axes.plot([p["bits_per_weight"] for p in best], [100 * p["top1"] for p in best], marker="o",
                  markersize=3, color=colour, label=method.replace("_", " "))
    axes.axhline(100 * float_top1, color="black", linewidth=0.8, linestyle="--", label="float")
    axes.set(xlabel="bits per weight (DeepCABAC payload)", ylabel="top-1 on 360 held-out digits (%)",
             xlim=(1.0, 4.2), ylim=(40, 100), title="digits CNN: quantizers before DeepCABAC")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})

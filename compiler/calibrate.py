"""Calibration: run the float graph over a data set and choose each tensor's float range (Zhouyi whitepaper §2.2.5).

The whitepaper (§2.2.5) collects per-tensor statistics over a calibration set without labels and picks each
tensor's [min, max] by one of: extrema, mean (of the batches' extrema, weighted), N-std (mean +- N standard
deviations) or KL divergence (TensorRT's entropy calibration, which it cites). Percentile, which the issue
asks for and the whitepaper does not name, clips at a percentile of |x|. docs/compiler.md §2 records the choices.

:func:`collect` streams the set through onnxruntime in batches (the float graph with every tensor an
output, so one run yields every activation) and keeps, per float tensor, the global and per-batch extrema
and float64 sums for mean and standard deviation; the histogram methods take a second pass that bins |x|
over [0, max |x|]; with ``samples`` each keeps a uniform sample of its values too (for the INT4 activation step
search of T/AI 115.1-2021 §7.2.4.3, compiler/activation_formats.py); with ``bound_rate`` each run's N-sigma
percentiles (the bounded-ReLU statistics of §7.2.4.4, method "brelu"). :func:`choose_range` turns a tensor's
statistics into (lo, hi).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from aipu.compiler.graph import Graph
from aipu.compiler.npz_file import read_npz
from aipu.sim.golden.rounding import round_half_away
from aipu.sim.machine.errors import ArrayHeader, InputError

METHODS = ("extrema", "mean", "nstd", "kld", "percentile", "brelu")
HISTOGRAM_METHODS = frozenset({"kld", "percentile"})
HISTOGRAM_BINS = 2048                    # TensorRT's entropy calibration uses 2048 bins of |x|
KLD_KEEPS_PERCENT = 99.9                 # kld's threshold never clips more of |x| than this percentile does
MAX_CALIBRATION_ELEMENTS = 1 << 28       # 1 GiB of float32 samples
SAMPLE_VALUES = 1 << 15                  # values a tensor keeps for the INT4 step search (collect(keep_samples=True))
_FLOAT_KINDS = "f"


@dataclass
class TensorStats:
    """What calibration keeps of one tensor over the whole set."""

    minimum: float = math.inf
    maximum: float = -math.inf
    batch_minima: list[float] = field(default_factory=list)
    batch_maxima: list[float] = field(default_factory=list)
    total: float = 0.0
    total_squares: float = 0.0
    count: int = 0
    histogram: np.ndarray | None = None      # counts of |x| in HISTOGRAM_BINS equal bins over [0, abs_max]
    sample: np.ndarray | None = None         # up to SAMPLE_VALUES of its values, each run's equally likely
    sampled: int = 0                         # the values the sample was drawn from
    run_bounds: list[tuple[float, float]] = field(default_factory=list)   # "brelu": each run's percentiles

    @property
    def abs_max(self) -> float:
        return max(abs(self.minimum), abs(self.maximum))

    def add(self, values: np.ndarray, *, batch_start: bool = True) -> None:
        """One run's values; ``batch_start`` opens a new batch of the per-batch extrema, else they join the
        latest (runs are added as they come, so that no batch of every activation is held at once)."""
        low, high = float(values.min()), float(values.max())
        self.minimum, self.maximum = min(self.minimum, low), max(self.maximum, high)
        if batch_start or not self.batch_minima:
            self.batch_minima.append(low)
            self.batch_maxima.append(high)
        else:
            self.batch_minima[-1] = min(self.batch_minima[-1], low)
            self.batch_maxima[-1] = max(self.batch_maxima[-1], high)
        as_float64 = values.astype(np.float64, copy=False)
        self.total += float(as_float64.sum())
        self.total_squares += float(np.square(as_float64).sum())
        self.count += values.size

    def add_to_sample(self, values: np.ndarray, rng: np.random.Generator) -> None:
        """Reservoir sampling (each value seen kept with probability SAMPLE_VALUES / seen) over every
        ``step``-th value of a run, ``step`` keeping at most 2 * SAMPLE_VALUES of a large one."""
        flat = values.reshape(-1)
        flat = flat[::max(1, flat.size // SAMPLE_VALUES)].astype(np.float32)
        if self.sample is None:
            self.sample = np.empty(0, np.float32)
        room = SAMPLE_VALUES - self.sample.size
        self.sample = np.concatenate([self.sample, flat[:room]])
        rest, seen = flat[room:], self.sampled + min(room, flat.size)
        if rest.size:
            slots = (rng.random(rest.size) * (seen + 1 + np.arange(rest.size))).astype(np.int64)
            kept = slots < SAMPLE_VALUES
            self.sample[slots[kept]] = rest[kept]
        self.sampled = seen + rest.size

    def add_run_bounds(self, values: np.ndarray, rate: float) -> None:
        """A run's N-sigma bounds: T/AI 115.1-2021 Table 196's n_sigma_of at ``rate`` (the sorted values' entry at
        round(size·rate), by a partial sort) and the entry of the same rank from the bottom."""
        flat = values.reshape(-1)
        upper = min(int(round_half_away(flat.size * rate)), flat.size - 1)
        lower = flat.size - 1 - upper                   # the same rank from the other end
        low, high = np.partition(flat, (lower, upper))[[lower, upper]]
        self.run_bounds.append((float(low), float(high)))

    def add_to_histogram(self, values: np.ndarray) -> None:
        if self.histogram is None:
            self.histogram = np.zeros(HISTOGRAM_BINS, np.int64)
        if self.abs_max > 0:
            counts, _ = np.histogram(np.abs(values), bins=HISTOGRAM_BINS, range=(0.0, self.abs_max))
            self.histogram += counts
        else:
            self.histogram[0] += values.size


LABELS = "labels"            # the array of class indices in an evaluation set (`aipu compile --eval`)


def read_samples(path, inputs: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Float samples for a model's ``inputs`` (name -> shape) from ``path``: an .npz with one array per input,
    named as the input (a model with one input also takes any single name, or a lone .npy), shaped
    [samples, *input shape[1:]], the same number of samples for every input, all finite. As float32.
    Calibration sets and `aipu run --input` files both come this way."""
    return _read_samples(path, inputs, labeled=False)[0]


def read_labeled_samples(path, inputs: dict[str, tuple[int, ...]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """An evaluation set: the samples as :func:`read_samples` reads them, and an integer array ``labels``
    ([samples], the class index of each) in the same .npz."""
    return _read_samples(path, inputs, labeled=True)


def _read_samples(path, inputs: dict[str, tuple[int, ...]], labeled: bool) -> tuple[dict[str, np.ndarray],
                                                                                    np.ndarray | None]:
    def check_member(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        if labeled and name == LABELS:
            if dtype.kind not in "iu" or len(shape) != 1:
                raise InputError(name, ArrayHeader(dtype, shape), "integer class indices, shape [samples]")
            return
        target = name if name in inputs else next(iter(inputs)) if len(inputs) == 1 else None
        if target is None:
            raise InputError("array", name, f"one per model input ({', '.join(inputs)})")
        want = inputs[target]
        described = ArrayHeader(dtype, shape)
        if dtype.kind not in _FLOAT_KINDS:
            raise InputError(name, described, "a float array (float16, float32 or float64)")
        if len(shape) != len(want) or tuple(shape[1:]) != tuple(want[1:]) or shape[0] < 1 or shape[0] % want[0]:
            raise InputError(name, described, f"shape [samples, {', '.join(map(str, want[1:]))}], samples a "
                                              f"multiple of {want[0]} (input {target!r} is {'x'.join(map(str, want))})")
        if math.prod(shape) > MAX_CALIBRATION_ELEMENTS:
            raise InputError(name, described, f"at most {MAX_CALIBRATION_ELEMENTS} elements")

    try:
        arrays = read_npz(path, check_member, single_npy=not labeled)
        labels = arrays.pop(LABELS, None)
        if labeled and labels is None:
            raise InputError(LABELS, "missing", "an integer array 'labels' beside the inputs")
        if len(inputs) == 1 and len(arrays) == 1:
            arrays = {next(iter(inputs)): next(iter(arrays.values()))}
        for name in arrays:
            if name not in inputs:
                raise InputError("array", name, f"one per model input ({', '.join(inputs)})")
        for name in inputs:
            if name not in arrays:
                raise InputError(name, "missing", f"one array per model input ({', '.join(inputs)})")
        counts = {name: array.shape[0] for name, array in arrays.items()}
        if labels is not None:
            counts[LABELS] = labels.shape[0]
        if len(set(counts.values())) > 1:
            raise InputError("samples", counts, "the same number for every input")
        data = {name: array.astype(np.float32) for name, array in arrays.items()}
        for name, array in data.items():
            bad = np.flatnonzero(~np.isfinite(array))
            if bad.size:
                raise InputError(name, f"{array.reshape(-1)[bad[0]]} at flat index {int(bad[0])}", "finite values")
    except InputError as error:
        raise error.within(path) from None
    return data, labels


def collect(graph: Graph, samples: dict[str, np.ndarray], *, batch_size: int = 16, histograms: bool = False,
            progress: bool = False, threads: int = 1, keep_samples: bool = False,
            bound_rate: float | None = None) -> dict[str, TensorStats]:
    """Statistics of every float tensor of ``graph`` (its inputs and every node output) over ``samples``,
    ``batch_size`` samples making one batch of the per-batch extrema. The graph runs one sample at a time,
    at the batch size it was shaped for (constants folded from shapes hold that size). ``keep_samples``: each
    tensor's statistics keep a sample of its values (TensorStats.add_to_sample, seeded: the same every run);
    ``bound_rate``: each run's N-sigma percentiles (TensorStats.add_run_bounds)."""
    from tqdm import tqdm

    session, names = float_session(graph, threads)
    stats = {name: TensorStats() for name in (*graph.inputs, *names)}
    batch = graph.shapes[graph.inputs[0]][0]
    count = next(iter(samples.values())).shape[0]
    passes = 2 if histograms else 1
    rng = np.random.default_rng(0)
    with tqdm(total=count * passes, unit="sample", desc="calibration", disable=not progress) as bar:
        for histogram_pass in range(passes):
            for first in range(0, count, batch_size):
                for start in range(first, min(count, first + batch_size), batch):
                    feeds = {name: array[start:start + batch] for name, array in samples.items()}
                    computed = session.run(names, feeds)
                    _check_finite(graph, names, computed)
                    for name, value in (*zip(names, computed), *feeds.items()):
                        if histogram_pass:
                            stats[name].add_to_histogram(value)
                        else:
                            stats[name].add(value, batch_start=start == first)
                            if keep_samples:
                                stats[name].add_to_sample(value, rng)
                            if bound_rate is not None:
                                stats[name].add_run_bounds(value, bound_rate)
                    bar.update(batch)
    return stats


def _check_finite(graph: Graph, names: list[str], values: list[np.ndarray]) -> None:
    """InputError naming the first node (in graph order) whose float output is inf or nan on a calibration
    sample: no range (and no int8 scale) holds it."""
    computed = dict(zip(names, values))
    for node, name in ((node, name) for node in graph.nodes for name in node.outputs if name in computed):
        value = computed[name]
        bad = np.flatnonzero(~np.isfinite(value))
        if bad.size:
            raise InputError(f"node {node.name!r} ({node.op}) output {name!r}",
                             f"{value.reshape(-1)[bad[0]]} at flat index {int(bad[0])}",
                             "finite values on the calibration set (float32 overflows here)").within(graph.source)


def float_session(graph: Graph, threads: int):
    """An onnxruntime session on the float graph whose outputs are every float tensor the nodes compute."""
    model = graph.to_onnx(every_tensor_an_output=True)
    names = [output.name for output in model.graph.output
             if np.dtype(graph.dtypes[output.name]).kind == _FLOAT_KINDS]
    return FloatSession(model, threads, graph.source), names


class FloatSession:
    """onnxruntime on a float model, its failures (a model it refuses, a node that fails on the data) an
    InputError naming the model. The compiler's own checks (compiler/consistency.py) come first; this names
    whatever they leave to onnxruntime."""

    def __init__(self, model, threads: int, source: str):
        import onnxruntime

        self.source = source
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = threads
        options.log_severity_level = 4      # fatal only: a failure is this class's one-line error, not a log too
        try:
            self.session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                                        providers=["CPUExecutionProvider"])
        except Exception as exc:     # onnxruntime's own exception classes, one per status code
            raise self._refused(exc) from None

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self.session.run(names, feeds)
        except Exception as exc:
            raise self._refused(exc) from None

    def _refused(self, exc: Exception) -> InputError:
        message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", " ".join(str(exc).split()))
        message = re.sub(r"^Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: ",
                         r"node '\2' (\1): ", message)
        return InputError("onnxruntime", "failed", f"a float model onnxruntime runs, the reference the int8 model "
                                                   f"is calibrated and judged against ({message[:300]})"
                          ).within(self.source)


def choose_range(stats: TensorStats, method: str, *, n_std: float = 3.0, percentile: float = 99.99,
                 momentum: float | None = None, levels: int = 128) -> tuple[float, float]:
    """The float range [lo, hi] of one tensor by ``method`` (see the module docstring); always within the
    observed extrema. ``levels``: the quantized levels of |x| (128 for int8 symmetric), for KL divergence."""
    if method not in METHODS:
        raise ValueError(f"calibration method {method!r}: expected one of {', '.join(METHODS)}")
    low, high = stats.minimum, stats.maximum
    if method == "extrema":
        return low, high
    if method == "mean":
        weights = _batch_weights(len(stats.batch_maxima), momentum)
        return float(weights @ stats.batch_minima), float(weights @ stats.batch_maxima)
    if method == "brelu":       # T/AI 115.1-2021 §7.2.4.4 stage 1: the runs' N-sigma bounds, averaged
        if not stats.run_bounds:
            raise ValueError("calibration method 'brelu' needs run bounds (collect(..., bound_rate=...))")
        lows, highs = np.mean(np.array(stats.run_bounds), axis=0)
        return max(low, float(lows)), min(high, float(highs))
    if method == "nstd":
        mean = stats.total / stats.count
        std = math.sqrt(max(0.0, stats.total_squares / stats.count - mean * mean))
        return max(low, mean - n_std * std), min(high, mean + n_std * std)
    if stats.histogram is None:
        raise ValueError(f"calibration method {method!r} needs histograms (collect(..., histograms=True))")
    if method == "percentile":
        threshold = _percentile_threshold(stats.histogram, stats.abs_max, percentile)
    else:     # KL alone put a page's white background, a spike, last and clipped every text pixel (compiler.md §2)
        threshold = max(kl_threshold(stats.histogram, stats.abs_max, levels),
                        _percentile_threshold(stats.histogram, stats.abs_max, KLD_KEEPS_PERCENT))
    return max(low, -threshold), min(high, threshold)


# Operators whose output follows one data input value by value (the other inputs constants) or gathers it.
_VALUE_BY_VALUE = frozenset(("Sigmoid", "HardSigmoid", "Tanh", "Relu", "Clip", "LeakyRelu", "HardSwish", "Softmax",
                             "Mul", "Add", "Sub", "Div", "Reshape", "Flatten", "Transpose", "Squeeze",
                             "Unsqueeze", "Identity", "Resize", "Concat"))


def output_determining(graph: Graph) -> set[str]:
    """The graph's outputs and, back through operators that pass values on one by one, the tensors they come
    from, up to the output of the first operator that mixes values (a conv's logits before a Sigmoid): all
    keep their extrema whatever the method. kld on a text detector clipped the logits' rare positive tail
    (the text) before the Sigmoid, and its probability map read 0 everywhere."""
    producer, keep, pending = graph.producer(), set(), list(graph.outputs)
    while pending:
        name = pending.pop()
        if name in keep or name in graph.constants:
            continue
        keep.add(name)
        node = producer.get(name)
        if node is not None and node.op in _VALUE_BY_VALUE:
            data = [edge for edge in node.inputs if edge and edge not in graph.constants]
            if len(data) == 1 or node.op == "Concat":
                pending += data
    return keep


def _batch_weights(batches_seen: int, momentum: float | None) -> np.ndarray:
    """The whitepaper's alpha_i (sum 1): equal, or an exponential moving average with ``momentum`` (the newest batch
    weighs 1 - momentum, the first keeps what the average started from)."""
    if momentum is None:
        return np.full(batches_seen, 1.0 / batches_seen)
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum = {momentum}: expected 0 <= momentum < 1")
    ages = np.arange(batches_seen - 1, -1, -1)
    weights = (1.0 - momentum) * momentum ** ages
    weights[0] = momentum ** (batches_seen - 1)
    return weights


def _percentile_threshold(histogram: np.ndarray, abs_max: float, percentile: float) -> float:
    if not 0.0 < percentile <= 100.0:
        raise ValueError(f"percentile = {percentile}: expected 0 < percentile <= 100")
    cumulative = np.cumsum(histogram)
    index = int(np.searchsorted(cumulative, cumulative[-1] * percentile / 100.0))
    return abs_max * min(index + 1, histogram.size) / histogram.size


def kl_threshold(histogram: np.ndarray, abs_max: float, levels: int) -> float:
    """The clipping threshold of |x| whose ``levels``-level quantization loses the least information:
    for each candidate i (levels .. bins), P is the histogram's first i bins with everything beyond added to
    the last, Q is P merged into ``levels`` groups and spread back evenly over each group's non-empty
    bins; the i with the smallest KL(P || Q) wins, and the threshold is its upper bin edge."""
    bins = histogram.size
    if abs_max == 0 or levels >= bins:
        return abs_max
    counts = histogram.astype(np.float64)
    tail = np.concatenate((np.cumsum(counts[::-1])[::-1], [0.0]))    # tail[i] = sum of counts[i:]
    best, best_divergence = bins, math.inf
    for i in range(levels, bins + 1):
        reference = counts[:i].copy()
        reference[-1] += tail[i]
        present = counts[:i] > 0
        groups = np.minimum(np.arange(i) * levels // i, levels - 1)   # which of the levels each bin joins
        group_sums = np.bincount(groups, weights=counts[:i], minlength=levels)
        group_sizes = np.bincount(groups, weights=present, minlength=levels)
        spread = np.where(present, group_sums[groups] / np.maximum(group_sizes[groups], 1), 0.0)
        p = reference / reference.sum()
        q_total = spread.sum()
        if q_total == 0:
            continue
        q = spread / q_total
        mask = p > 0
        # a bin with p > 0 and q = 0 (the clipped tail moved into the last bin) is made finite as TensorRT does
        divergence = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
        if divergence < best_divergence:
            best, best_divergence = i, divergence
    return abs_max * best / bins

"""Calibration (compiler/calibrate.py): the data set reader, the statistics, and every range method."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipu.app.models.train_digits import MODEL_PATH
from aipu.app.ort_compare import single_thread_session
from aipu.compiler.calibrate import (HISTOGRAM_BINS, TensorStats, choose_range, collect, kl_threshold,
                                    read_labeled_samples, read_samples)
from aipu.compiler.graph import load_graph
from aipu.compiler.normalize import normalize
from aipu.sim.machine.errors import InputError


@pytest.fixture(scope="module")
def digits_graph():
    return normalize(load_graph(MODEL_PATH))


def _inputs(graph) -> dict[str, tuple[int, ...]]:
    return {name: graph.shapes[name] for name in graph.inputs}


def _stats(values: np.ndarray, batch: int = 100, histogram: bool = True) -> TensorStats:
    stats = TensorStats()
    for start in range(0, values.size, batch):
        stats.add(values[start:start + batch])
    if histogram:
        for start in range(0, values.size, batch):
            stats.add_to_histogram(values[start:start + batch])
    return stats


def test_statistics_are_those_of_every_activation(digits_graph, digits_data):
    images = digits_data["calibration_images"][:40]
    stats = collect(digits_graph, {digits_graph.inputs[0]: images}, batch_size=16, histograms=True)
    model = digits_graph.to_onnx(every_tensor_an_output=True)
    names = [output.name for output in model.graph.output]
    session = single_thread_session(model)
    runs = [session.run(names, {digits_graph.inputs[0]: image[None]}) for image in images]   # batch 1
    values = {name: np.concatenate([run[index] for run in runs]) for index, name in enumerate(names)}
    values[digits_graph.inputs[0]] = images
    assert set(stats) == set(values)
    for name, tensor in values.items():
        got = stats[name]
        assert (got.minimum, got.maximum) == (float(tensor.min()), float(tensor.max()))
        assert got.count == tensor.size and len(got.batch_maxima) == 3     # 16 + 16 + 8 samples
        assert got.total == pytest.approx(float(tensor.astype(np.float64).sum()), rel=1e-9, abs=1e-9)
        assert got.histogram.sum() == tensor.size


def test_extrema_mean_and_nstd():
    values = np.concatenate([np.linspace(-1, 1, 300), [5.0, -3.0]]).astype(np.float32)
    stats = _stats(values, batch=100, histogram=False)
    assert choose_range(stats, "extrema") == (-3.0, 5.0)
    lows = [values[i:i + 100].min() for i in (0, 100, 200, 300)]
    highs = [values[i:i + 100].max() for i in (0, 100, 200, 300)]
    assert choose_range(stats, "mean") == pytest.approx((np.mean(lows), np.mean(highs)))
    newest = choose_range(stats, "mean", momentum=0.5)          # weights 1/8, 1/8, 1/4, 1/2 (oldest first)
    weights = [0.125, 0.125, 0.25, 0.5]
    assert newest == pytest.approx((np.dot(weights, lows), np.dot(weights, highs)))
    mean, std = float(values.astype(np.float64).mean()), float(values.astype(np.float64).std())
    assert choose_range(stats, "nstd", n_std=2.0) == pytest.approx((mean - 2 * std, mean + 2 * std))
    assert choose_range(stats, "nstd", n_std=100.0) == (-3.0, 5.0)     # never beyond the extrema


def test_percentile_clips_the_tail():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.uniform(-1, 1, 100_000), [40.0]]).astype(np.float32)
    low, high = choose_range(_stats(values, batch=10_000), "percentile", percentile=99.0)
    assert high == pytest.approx(0.99, abs=2 * 40.0 / HISTOGRAM_BINS) and low == -high
    assert choose_range(_stats(values, batch=10_000), "percentile", percentile=100.0)[1] == pytest.approx(40.0)


def test_brelu_averages_each_run_s_n_sigma_bounds():
    """T/AI 115.1-2021 §7.2.4.4 stage 1: the runs' bounds are quant.brelu's n_sigma_of, averaged."""
    from aipu.quant.brelu import N_SIGMA_PERCENTILE, n_sigma_bound

    rng = np.random.default_rng(2)
    runs = [rng.laplace(0, scale, 4000).astype(np.float32) for scale in (1.0, 2.0, 0.5)]
    stats = TensorStats()
    for run in runs:
        stats.add(run)
        stats.add_run_bounds(run, N_SIGMA_PERCENTILE[3.2])
    low, high = choose_range(stats, "brelu")
    assert high == pytest.approx(np.mean([n_sigma_bound(run, 3.2) for run in runs]))
    assert low == pytest.approx(np.mean([-n_sigma_bound(-run[::-1], 3.2) for run in runs]), rel=0.05)
    assert min(map(np.min, runs)) < low < 0 < high < max(map(np.max, runs))
    relu = TensorStats()
    relu.add(np.maximum(runs[0], 0))
    relu.add_run_bounds(np.maximum(runs[0], 0), N_SIGMA_PERCENTILE[3.0])
    assert choose_range(relu, "brelu")[0] == 0.0
    with pytest.raises(ValueError, match="needs run bounds"):
        choose_range(_stats(runs[0], histogram=False), "brelu")


def test_kl_divergence_ignores_rare_outliers_and_keeps_a_dense_range():
    rng = np.random.default_rng(1)
    gaussian = np.concatenate([rng.normal(0, 1, 200_000), [30.0, -25.0]]).astype(np.float32)
    low, high = choose_range(_stats(gaussian, batch=50_000), "kld")
    assert 2.0 < high < 10.0 and low == -high          # the bulk kept, the outliers at 25-30 clipped
    uniform = rng.uniform(0, 1, 200_000).astype(np.float32)
    assert choose_range(_stats(uniform, batch=50_000), "kld")[1] > 0.9       # nothing to clip
    assert kl_threshold(np.zeros(HISTOGRAM_BINS, np.int64), 0.0, 128) == 0.0


def test_kl_divergence_keeps_what_a_spike_away_from_zero_would_hide():
    """A page's first feature map: 92 % background at one value, 8 % text beyond it. KL alone puts the spike in
    the last bin and clips every text value; kld keeps at least the 99.9th percentile of |x|."""
    rng = np.random.default_rng(2)
    page = np.concatenate([np.full(184_000, 0.3), rng.uniform(0.5, 4.0, 16_000)]).astype(np.float32)
    stats = _stats(page, batch=50_000)
    assert kl_threshold(stats.histogram, stats.abs_max, 128) < 0.5          # the text, clipped by KL alone
    assert choose_range(stats, "kld")[1] >= np.percentile(page, 99.9) - 4.0 / HISTOGRAM_BINS


def test_what_determines_an_output_value_by_value_keeps_its_extrema(tmp_path):
    """kld on the logits before an output's Sigmoid (a detector's probability map) would clip its rare high
    values; the logits and the chain to the output keep their extrema, a tensor feeding a conv does not."""
    from aipu.app.models.synthetic import GraphBuilder
    from aipu.compiler.calibrate import output_determining

    b = GraphBuilder(0, 3, 8)
    features = b.node("Relu", [b.conv("image", 3, 4)])
    logits = b.conv(features, 4, 1, kernel=1, bn=False)
    probability = b.node("Sigmoid", [b.node("Reshape", [logits, b.const(np.array([1, -1], np.int64))])])
    onnx.save(b.model(probability), tmp_path / "head.onnx")
    graph = normalize(load_graph(tmp_path / "head.onnx", {"image": (1, 3, 8, 8)}))
    assert output_determining(graph) >= {probability, logits} and features not in output_determining(graph)


def test_histogram_methods_need_histograms_and_parameters_are_checked():
    stats = _stats(np.arange(10, dtype=np.float32), histogram=False)
    with pytest.raises(ValueError, match="needs histograms"):
        choose_range(stats, "kld")
    with pytest.raises(ValueError, match="expected one of extrema, mean, nstd, kld, percentile"):
        choose_range(stats, "entropy")
    with pytest.raises(ValueError, match="momentum"):
        choose_range(stats, "mean", momentum=1.0)


def test_calibration_files_are_checked(tmp_path, digits_graph):
    name = digits_graph.inputs[0]
    good = np.random.default_rng(0).random((5, 1, 8, 8)).astype(np.float64)
    np.savez(tmp_path / "named.npz", **{name: good})
    np.savez(tmp_path / "any_name.npz", images=good)
    for path in ("named.npz", "any_name.npz"):
        data = read_samples(tmp_path / path, _inputs(digits_graph))
        assert list(data) == [name] and data[name].dtype == np.float32 and data[name].shape == (5, 1, 8, 8)
    bad = {
        "ints.npz": ({name: good.astype(np.int32)}, "a float array"),
        "shape.npz": ({name: good[:, :, :4]}, r"shape \[samples, 1, 8, 8\]"),
        "nan.npz": ({name: np.where(good > 0.5, np.nan, good)}, "finite values"),
        "two.npz": ({name: good, "extra": good}, "one per model input"),
    }
    for file_name, (arrays, message) in bad.items():
        np.savez(tmp_path / file_name, **arrays)
        with pytest.raises(InputError, match=message) as caught:
            read_samples(tmp_path / file_name, _inputs(digits_graph))
        assert str(caught.value).startswith(str(tmp_path / file_name))
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(InputError, match="junk.npz: format"):
        read_samples(tmp_path / "junk.npz", _inputs(digits_graph))


def test_an_activation_overflowing_float32_is_named(tmp_path):
    """A node whose float output is inf on the calibration set: no range holds it, named before any."""
    from aipu.app.models.synthetic import GraphBuilder

    b = GraphBuilder(0, 1, 2)
    y = b.node("Relu", [b.node("Mul", ["image", b.const(np.float32(3e38))])])
    onnx.save(b.model(y), tmp_path / "m.onnx")
    graph = normalize(load_graph(tmp_path / "m.onnx"))
    with pytest.raises(InputError, match=r"m.onnx: node 'mul\d+' \(Mul\) output 'mul\d+' = '-?inf at flat index 0': "
                                         "finite values on the calibration set"):
        collect(graph, {"image": np.full((2, 1, 2, 2), 2.0, np.float32)})


def test_a_graph_with_two_inputs_needs_both_by_name(tmp_path):
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 2, 3, 3]) for n in "ab"],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 3, 3])])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    two = normalize(load_graph(tmp_path / "m.onnx"))
    ones = np.ones((4, 2, 3, 3), np.float32)
    np.savez(tmp_path / "one.npz", a=ones)
    with pytest.raises(InputError, match="b = 'missing'"):
        read_samples(tmp_path / "one.npz", _inputs(two))
    np.savez(tmp_path / "counts.npz", a=ones, b=ones[:3])
    with pytest.raises(InputError, match="the same number for every input"):
        read_samples(tmp_path / "counts.npz", _inputs(two))
    np.savez(tmp_path / "both.npz", a=ones, b=2 * ones)
    stats = collect(two, read_samples(tmp_path / "both.npz", _inputs(two)), batch_size=3)
    assert (stats["y"].minimum, stats["y"].maximum) == (3.0, 3.0)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(["float32", "float64", "float16", "int8", "uint16", "bool", "complex64"]),
       shape=st.lists(st.integers(0, 9), min_size=0, max_size=5), name=st.sampled_from(["image", "other"]),
       cut=st.integers(0, 400))
def test_fuzzed_calibration_files_load_or_fail_cleanly(tmp_path, digits_graph, dtype, shape, name, cut):
    """Random headers, and the same files cut short, as .npz and as a lone .npy: data or an InputError naming
    the file, nothing else."""
    archive, single = tmp_path / "fuzz.npz", tmp_path / f"{name}.npy"
    np.savez(archive, **{name: np.zeros(shape, dtype)})
    np.save(single, np.zeros(shape, dtype))
    for path, data in ((archive, archive.read_bytes()), (single, single.read_bytes())):
        _load_or_refuse(path, data, cut, digits_graph)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(["int64", "int8", "uint16", "float32", "bool"]),
       shape=st.lists(st.integers(0, 9), min_size=0, max_size=3), samples=st.integers(0, 9), cut=st.integers(0, 600))
def test_fuzzed_evaluation_files_load_or_fail_cleanly(tmp_path, digits_graph, dtype, shape, samples, cut):
    """An evaluation set's labels with random headers beside well-formed images, whole and cut short."""
    path = tmp_path / "eval.npz"
    np.savez(path, image=np.zeros((samples, 1, 8, 8), np.float32), labels=np.zeros(shape, dtype))
    data = path.read_bytes()
    for variant in (data, data[:cut]):
        path.write_bytes(variant)
        try:
            arrays, labels = read_labeled_samples(path, _inputs(digits_graph))
        except InputError as error:
            assert str(error).startswith(str(path)) and "\n" not in str(error)
        else:
            assert labels.shape == (arrays["image"].shape[0],) and labels.dtype.kind in "iu"


def _load_or_refuse(path, data: bytes, cut: int, digits_graph) -> None:
    for variant in (data, data[:cut]):
        path.write_bytes(variant)
        try:
            arrays = read_samples(path, _inputs(digits_graph))
        except InputError as error:
            assert str(error).startswith(str(path)) and "\n" not in str(error)
        else:
            assert arrays[digits_graph.inputs[0]].shape[1:] == (1, 8, 8)

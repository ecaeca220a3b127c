"""`aipu sweep` (docs/cycle-model.md, "Design-space sweep"): the grid and its flags, every row equal to the
compiler and cycle model run by hand for that configuration, the cache that makes a re-run compute only what is
new (and ignores what it did not write), and the CLI with its table, JSON, CSV, plot and clean errors."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.app.sweep import FIGURES, POINTS_MAX, Cache, grid, measure, parse_axis, run_sweep
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Unit


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo model, its calibration images as .npy and the quantized model (as the sweep makes it)."""
    from aipu.app.sweep import demo_inputs
    from aipu.compiler.driver import quantize_model

    root = tmp_path_factory.mktemp("sweep")
    with demo_inputs() as (model, calibration):
        (root / "calib.npy").write_bytes(calibration.read_bytes())
    _, qmodel, _ = quantize_model(model, root / "calib.npy")
    return model, root / "calib.npy", qmodel


@pytest.fixture(scope="module")
def scheduler():
    """An in-process Dask cluster the tests hand to the sweep as an existing one (``--scheduler``)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        yield cluster.scheduler_address


def test_axes_take_keys_and_the_mac_shorthand():
    assert parse_axis("mac=8x8,16x32", DEFAULT).values == ((8, 8), (16, 32))
    assert parse_axis("dram.bytes_per_cycle = 8, 32", DEFAULT).keys == ("dram.bytes_per_cycle",)
    points = grid(DEFAULT, [parse_axis("mac=8x8,16x16", DEFAULT), parse_axis("wdec.bins_per_cycle=1,2,4", DEFAULT)])
    assert [point.label for point in points[:3]] == [f"mac=8x8 wdec.bins_per_cycle={bins}" for bins in (1, 2, 4)]
    assert points[4].config.mac.rows == 16 and points[4].config.wdec.bins_per_cycle == 2
    assert [point.label for point in grid(DEFAULT, [])] == ["base"]


@pytest.mark.parametrize("text, message", [
    ("mac.rowz=8", "--vary = 'mac.rowz=8': KEY=V1,V2,... with KEY one of mac, mac.rows"),
    ("mac.rows", "--vary = 'mac.rows': KEY=V1,V2"),
    ("mac.rows=8,,16", "--vary mac.rows = '8,,16': a comma-separated list of values, each an integer"),
    ("mac.rows=eight", "--vary mac.rows = 'eight': an integer"),
    ("mac=8", "--vary mac = '8': ROWSxCOLS, e.g. 16x16"),
    ("mac.rows=8,8", "--vary mac.rows = '8': each value once"),
    ("dram.bytes_per_cycle=12", "--vary dram.bytes_per_cycle = 12: "),
])
def test_a_bad_axis_names_the_flag_and_what_is_allowed(text, message):
    with pytest.raises(InputError) as raised:
        parse_axis(text, DEFAULT)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_grid_is_bounded():
    axes = [parse_axis(f"mac.rows={','.join(map(str, range(1, 17)))}", DEFAULT),
            parse_axis(f"mac.cols={','.join(map(str, range(1, 18)))}", DEFAULT)]
    with pytest.raises(InputError, match=f"at most {POINTS_MAX} in all"):
        grid(DEFAULT, axes)
    with pytest.raises(InputError, match="each configuration key in one --vary"):
        grid(DEFAULT, [parse_axis("mac=8x8", DEFAULT), parse_axis("mac.rows=4", DEFAULT)])


def test_every_row_is_the_compiler_and_the_cycle_model_by_hand(demo, scheduler, tmp_path):
    """Rows against `measure` in this process; a re-run takes everything from the cache; a new value computes
    only itself; a configuration the compiler cannot lower for is a row with its error, not a failed sweep."""
    model, calibration, qmodel = demo
    axes = [parse_axis("mac=8x8,16x16", DEFAULT), parse_axis("dram.bytes_per_cycle=4,16", DEFAULT)]
    first = run_sweep(model, calibration, base=DEFAULT, axes=axes, scheduler=scheduler, cache_folder=tmp_path)
    assert len(first.rows) == 4 and len(first.computed) == 4
    for point, row in zip(grid(DEFAULT, axes), first.rows):
        assert {name: row[name] for name in FIGURES} == measure(qmodel, point.config, False)
        assert row["error"] is None and row["config_hash"] == point.config.config_hash()
    cycles = {row["label"]: row["total_cycles"] for row in first.rows}
    assert cycles["mac=8x8 dram.bytes_per_cycle=4"] > cycles["mac=16x16 dram.bytes_per_cycle=16"]
    assert all(row["dram_read_bytes"] > 0 and 0 < row["mac_utilisation"] < 1 for row in first.rows)

    again = run_sweep(model, calibration, base=DEFAULT, axes=axes, scheduler=scheduler, cache_folder=tmp_path)
    assert again.computed == [] and again.rows == first.rows
    wider = [parse_axis("mac=8x8,16x16,32x32", DEFAULT), axes[1]]
    grown = run_sweep(model, calibration, base=DEFAULT, axes=wider, scheduler=scheduler, cache_folder=tmp_path)
    assert sorted(grown.computed) == ["mac=32x32 dram.bytes_per_cycle=16", "mac=32x32 dram.bytes_per_cycle=4"]

    tiny = [parse_axis("buffers.param.bytes=16,8192", DEFAULT)]
    rows = run_sweep(model, calibration, base=DEFAULT, axes=tiny, scheduler=scheduler, cache_folder=None).rows
    assert "too large for: param" in rows[0]["error"] and rows[0]["total_cycles"] is None
    assert rows[1]["error"] is None


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"format": "aipu-sweep-cache"}', b"9" * 70000])
def test_the_cache_ignores_what_it_did_not_write(tmp_path, content):
    cache = Cache(tmp_path, "identity")
    path = tmp_path / "identity-hash.json"
    path.write_bytes(content)
    assert cache.load("hash") is None
    figures = {**dict.fromkeys(FIGURES), "error": "buffers.weight.bytes: too small"}
    cache.store("hash", figures)
    assert cache.load("hash") == figures
    assert Cache(tmp_path, "other").load("hash") is None
    path.unlink()
    path.mkdir()                                      # not a file: ignored, not read
    assert cache.load("hash") is None


def test_a_cache_entry_with_wrong_figures_is_recomputed(tmp_path):
    cache = Cache(tmp_path, "identity")
    good = {**dict.fromkeys(FIGURES), "error": None, "total_cycles": 10, "time_us": 0.1, "mac_utilisation": 0.5,
            "dram_read_bytes": 1, "dram_written_bytes": 1, "dram_stall_cycles": 0, "commands": 3,
            "busy_cycles": {unit.name: 0 for unit in Unit}}
    cache.store("hash", good)
    assert cache.load("hash") == good
    for name, bad in [("total_cycles", -1), ("time_us", float("nan")), ("busy_cycles", {"LOAD": 1}),
                      ("commands", True), ("error", 3), ("mac_utilisation", 1e300),
                      ("busy_cycles", {unit.name: 11 for unit in Unit})]:
        cache.store("hash", {**good, name: bad})
        assert cache.load("hash") is None, name


def test_sweep_cli_writes_table_json_csv_and_plot(demo, tmp_path, capsys):
    """The CLI on the demo model with its own local cluster (one worker)."""
    _, calibration, _ = demo
    out = {name: tmp_path / f"sweep.{name}" for name in ("json", "csv", "png")}
    assert main(["sweep", "--vary", "mac=8x8,16x16", "--workers", "1", "--cache", str(tmp_path / "cache"),
                 "--json", str(out["json"]), "--csv", str(out["csv"]), "--plot", str(out["png"])]) == 0
    printed = capsys.readouterr().out
    assert "demo digits_cnn.onnx: 2 configurations (0 cached, 2 computed)" in printed
    assert "mac=8x8" in printed and "mac=16x16" in printed
    document = json.loads(out["json"].read_text())
    assert document["format"] == "aipu-sweep" and document["axes"] == {"mac": ["8x8", "16x16"]}
    assert [row["mac.rows"] for row in document["rows"]] == [8, 16]
    header = out["csv"].read_text().splitlines()[0].split(",")
    assert {"label", "mac.rows", "total_cycles", "busy_cycles.CONV", "error"} <= set(header)
    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(out["png"]) > 10_000
    np.testing.assert_array_less(0, [row["total_cycles"] for row in document["rows"]])


@pytest.mark.parametrize("argv, message", [
    (["--vary", "mac.rows=0"], "--vary mac.rows = 0: "),
    (["--workers", "0"], "--workers = 0: an integer 1 .. 1024"),
    (["--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], "--workers = 2: only for the local cluster"),
    (["--calib", "x.npz"], "--calib = 'x.npz': only with a model"),
    (["--scheduler", "nonsense"], "--scheduler = 'nonsense': the address of a running Dask scheduler"),
])
def test_sweep_cli_errors_are_one_line(argv, message, capsys):
    assert main(["sweep", "--no-cache", *argv]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error


def test_a_wrong_scheduler_is_refused_even_with_every_row_cached(demo, scheduler, tmp_path, monkeypatch):
    from aipu.app import sweep
    from tests.app.test_scheduler_probe import peer

    model, calibration, _ = demo
    axes = [parse_axis("mac=8x8", DEFAULT)]
    run_sweep(model, calibration, base=DEFAULT, axes=axes, scheduler=scheduler, cache_folder=tmp_path)
    monkeypatch.setattr(sweep, "CONNECT_SECONDS", 0.5)
    with peer(None) as silent, pytest.raises(InputError, match="nothing came back within 0.5 s"):
        run_sweep(model, calibration, base=DEFAULT, axes=axes, scheduler=silent, cache_folder=tmp_path)

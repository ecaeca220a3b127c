"""`aipu sweep`: one network's cycles, MAC utilisation and DRAM traffic over a grid of hardware configurations
(docs/cycle-model.md, "Design-space sweep").

The model is calibrated and quantized once, here; each configuration is one Dask task that lowers the
quantized model for it and runs the cycle model on the program (a configuration the compiler cannot lower
for is a row with its error). Results are cached per (program identity, configuration), so a re-run
computes only what is new; the identity covers the model, the calibration set, the quantization, and the
source of the code that lowers and times, so any change of those invalidates the cache.
"""
from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import math
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from aipu.app.scheduler_probe import ALLOWED, probe_scheduler
from aipu.compiler.quant_options import QuantOptions
from aipu.sim.machine.arch import HardwareConfig, hardware_config_from_dict
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.files import read_at_most
from aipu.sim.machine.isa import Unit

FORMAT = "aipu-sweep"
SCHEMA_VERSION = 1
CACHE_FORMAT = "aipu-sweep-cache"
POINTS_MAX = 256                  # configurations in one sweep: the product of the axes
SHORTHANDS = {"mac": ("mac.rows", "mac.cols")}     # --vary mac=ROWSxCOLS sets both
# The code that decides a program and its timing: its source is part of the program identity.
CODE_PACKAGES = ("aipu.compiler", "aipu.rtl", "aipu.sim", "aipu.codec")
CONNECT_SECONDS = 10             # to reach an existing scheduler (--scheduler)
CACHE_FILE_BYTES_MAX = 1 << 16    # an entry is a few hundred bytes; anything larger is not ours
# The figures of one configuration, in the order of a row (all None but the error for one without a program).
FIGURES = ("total_cycles", "time_us", "mac_utilisation", "dram_read_bytes", "dram_written_bytes", "dram_stall_cycles",
           "busy_cycles", "commands", "error")
COUNTS = ("total_cycles", "dram_read_bytes", "dram_written_bytes", "dram_stall_cycles", "commands")
RATIOS = ("time_us", "mac_utilisation")


@dataclass(frozen=True)
class Axis:
    """One ``--vary``: its name as given (a dotted key, or a shorthand), the keys it sets, and its values
    (one integer per key)."""

    name: str
    keys: tuple[str, ...]
    values: tuple[tuple[int, ...], ...]

    def show(self, value: tuple[int, ...]) -> str:
        return "x".join(map(str, value))

    def listed(self) -> list:
        """The values as a JSON document lists them: integers, or ``ROWSxCOLS`` strings of a shorthand."""
        return [self.show(value) if len(self.keys) > 1 else value[0] for value in self.values]


@dataclass(frozen=True)
class Point:
    """One configuration of the grid: the settings of every axis on top of the base, and the configuration
    they make (None, with ``refused``, when the configuration's own checks reject the combination)."""

    settings: dict[str, int]
    label: str
    config: HardwareConfig | None
    refused: str | None = None


@dataclass
class Sweep:
    model: str
    calibration: str | None
    compress: str | None
    identity: str
    base: HardwareConfig
    axes: list[Axis]
    rows: list[dict]             # one per configuration, in grid order (the first axis varies slowest)
    computed: list[str]          # labels of the configurations computed now (the others came from the cache)
    seconds: float

    def document(self) -> dict:
        """The schema-versioned JSON document of `aipu sweep --json`."""
        return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "model": self.model,
                "calibration": self.calibration, "compress": self.compress, "program_identity": self.identity,
                "base_config_hash": self.base.config_hash(),
                "axes": {axis.name: axis.listed() for axis in self.axes},
                "cache": {"cached": len(self.rows) - len(self.computed), "computed": len(self.computed)},
                "seconds": round(self.seconds, 3), "rows": self.rows}


# --- Axes and the grid ------------------------------------------------------------------------------

def _leaf_keys(document: dict, prefix: str = "") -> list[str]:
    return [key for name, value in document.items()
            for key in (_leaf_keys(value, f"{prefix}{name}.") if isinstance(value, dict) else [prefix + name])]


def _configure(base: HardwareConfig, settings: dict[str, int]) -> HardwareConfig:
    """``base`` with dotted keys set; raises InputError naming a key the configuration refuses."""
    document = base.to_dict()
    for key, value in settings.items():
        *path, leaf = key.split(".")
        table = document
        for name in path:
            table = table[name]
        table[leaf] = value
    return hardware_config_from_dict(document)


def parse_axis(text: str, base: HardwareConfig) -> Axis:
    """``KEY=V1,V2,...`` (or ``mac=RxC,...``) checked value by value against ``base``: an unknown key, a value
    that is not an integer or that the configuration refuses raises InputError naming the flag."""
    name, equals, listed = (part.strip() for part in text.partition("="))
    known = _leaf_keys(base.to_dict())
    keys = SHORTHANDS.get(name, (name,))
    if not equals or not set(keys) <= set(known):
        raise InputError("--vary", text, f"KEY=V1,V2,... with KEY one of {', '.join([*SHORTHANDS, *known])}")
    pattern = "x".join(["([0-9]+)"] * len(keys))
    expected = "ROWSxCOLS, e.g. 16x16" if len(keys) > 1 else "an integer"
    items = [item.strip() for item in listed.split(",")]
    if not all(items):
        raise InputError(f"--vary {name}", listed, f"a comma-separated list of values, each {expected}")
    values = []
    for item in items:
        match = re.fullmatch(pattern, item)
        if match is None or any(len(digits) > 18 for digits in match.groups()):
            raise InputError(f"--vary {name}", item, f"{expected}")
        value = tuple(map(int, match.groups()))
        if value in values:
            raise InputError(f"--vary {name}", item, "each value once")
        try:
            _configure(base, dict(zip(keys, value)))
        except InputError as error:
            if error.field in keys:
                raise InputError(f"--vary {error.field}", error.value, error.allowed) from None
            raise InputError(f"--vary {name}", item, f"a value the base configuration allows ({error})") from None
        values.append(value)
    return Axis(name, keys, tuple(values))


def grid(base: HardwareConfig, axes: list[Axis]) -> list[Point]:
    """The Cartesian product of ``axes`` on top of ``base`` (just the base without axes), at most POINTS_MAX."""
    keys = [key for axis in axes for key in axis.keys]
    if len(set(keys)) != len(keys):
        raise InputError("--vary", " ".join(axis.name for axis in axes), "each configuration key in one --vary")
    count = math.prod(len(axis.values) for axis in axes)
    if count > POINTS_MAX:
        raise InputError("--vary", f"{count} configurations",
                         f"at most {POINTS_MAX} in all (the product of the axes' lengths)")
    points = []
    for combination in itertools.product(*(axis.values for axis in axes)):
        settings = {key: number for axis, value in zip(axes, combination) for key, number in zip(axis.keys, value)}
        label = " ".join(f"{axis.name}={axis.show(value)}" for axis, value in zip(axes, combination)) or "base"
        try:
            points.append(Point(settings, label, _configure(base, settings)))
        except InputError as error:       # each value is legal alone (parse_axis), this combination is not
            points.append(Point(settings, label, None, str(error)))
    return points


# --- Identity and cache -----------------------------------------------------------------------------

def _file_digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def code_fingerprint() -> str:
    """SHA-256 over the source of every module that lowers a model or times a program, and of this one
    (which derives the figures): editing any of them invalidates the cache."""
    digest = hashlib.sha256()
    for package in CODE_PACKAGES:
        folder = Path(importlib.import_module(package).__file__).parent
        for path in sorted(folder.rglob("*.py")):
            digest.update(f"{package}/{path.relative_to(folder).as_posix()}\0{_file_digest(path)}\0".encode())
    digest.update(_file_digest(Path(__file__)).encode())
    return digest.hexdigest()


def program_identity(model: Path, calibration: Path | None, options: QuantOptions, compress: str | None) -> str:
    """What decides the program of every configuration: the model's and calibration set's bytes, the
    quantization options, ``compress`` and the code."""
    parts = {"model": _file_digest(model), "calibration": _file_digest(calibration) if calibration else None,
             "quantization": asdict(options), "compress": compress, "code": code_fingerprint()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def default_cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aipu" / "sweep"


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def valid_figures(figures) -> bool:
    """Whether ``figures`` (from a cache file: hostile) has exactly the fields `measure` returns, well typed."""
    if not isinstance(figures, dict) or set(figures) != set(FIGURES):
        return False
    if figures["error"] is not None:
        return isinstance(figures["error"], str) and all(figures[name] is None for name in FIGURES[:-1])
    busy = figures["busy_cycles"]
    return (all(_is_count(figures[name]) for name in COUNTS)
            and all(isinstance(figures[name], (int, float)) and not isinstance(figures[name], bool)
                    and math.isfinite(figures[name]) and figures[name] >= 0 for name in RATIOS)
            and figures["mac_utilisation"] <= 1
            and isinstance(busy, dict) and list(busy) == [unit.name for unit in Unit]
            and all(_is_count(cycles) and cycles <= figures["total_cycles"] for cycles in busy.values()))


class Cache:
    """One JSON file per (program identity, configuration hash) in ``folder``. A file that does not parse,
    names another key or has other fields is ignored (and overwritten by the recomputed entry)."""

    def __init__(self, folder: Path, identity: str) -> None:
        self.folder, self.identity = Path(folder), identity
        self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, config_hash: str) -> Path:
        return self.folder / f"{self.identity}-{config_hash}.json"

    def load(self, config_hash: str) -> dict | None:
        path = self._path(config_hash)
        try:               # missing, not a regular file, too long, not JSON: not an entry (InputError is a ValueError)
            document = json.loads(read_at_most(path, CACHE_FILE_BYTES_MAX))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(document, dict) or document.get("format") != CACHE_FORMAT \
                or document.get("program_identity") != self.identity or document.get("config_hash") != config_hash:
            return None
        figures = document.get("figures")
        return figures if valid_figures(figures) else None

    def store(self, config_hash: str, figures: dict) -> None:
        """Written to a temporary file and renamed: a reader never sees half an entry."""
        document = {"format": CACHE_FORMAT, "program_identity": self.identity, "config_hash": config_hash,
                    "figures": figures}
        handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as stream:
                json.dump(document, stream)
            os.replace(temporary, self._path(config_hash))
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


# --- One configuration (a Dask task) ----------------------------------------------------------------

def _failed(error: str) -> dict:
    return {**dict.fromkeys(FIGURES[:-1]), "error": error}


def measure(qmodel, config: HardwareConfig, compress: str | None) -> dict:
    """The figures of ``qmodel`` lowered for ``config`` on the cycle model (shared DRAM); a configuration the
    compiler refuses (a buffer too small, ...) gives its error instead."""
    from aipu.compiler.lowering.network import lower_model
    from aipu.sim.cycle import simulate
    from aipu.sim.machine.memory import Memory

    try:
        network = lower_model(qmodel, config, compress=compress)
    except InputError as error:
        return _failed(str(error))
    try:
        memory = Memory.create(config, network.dram)
    except ValueError as error:           # the DRAM image does not fit dram.address_bits
        return _failed(str(error))
    result = simulate(network.program, memory, dram="shared")
    moved = result.dram_bytes
    return {"total_cycles": result.total_cycles, "time_us": result.total_cycles / config.clock_mhz,
            "mac_utilisation": result.mac_utilisation,
            "dram_read_bytes": moved[Unit.LOAD] + moved[Unit.WDEC], "dram_written_bytes": moved[Unit.STORE],
            "dram_stall_cycles": sum(result.dram_stall.values()),
            "busy_cycles": {unit.name: result.busy[unit] for unit in Unit}, "commands": len(network.program),
            "error": None}


# --- The sweep --------------------------------------------------------------------------------------

@contextmanager
def demo_inputs():
    """The embedded demo model and its calibration images as a lone .npy (deterministic bytes, so the cache
    key is stable), in a temporary folder."""
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH

    with tempfile.TemporaryDirectory(prefix="aipu-sweep-") as folder:
        calibration = Path(folder) / "digits_calibration.npy"
        np.save(calibration, np.load(DATA_PATH)["calibration_images"])
        yield MODEL_PATH, calibration


@contextmanager
def dask_client(scheduler: str | None, workers: int | None):
    """A client of the cluster at ``scheduler``, else of a local cluster of ``workers`` processes (all cores by
    default) with one thread each, quiet below warnings, its HTTP endpoint on a free port, closed on exit."""
    import logging

    from distributed import Client, LocalCluster

    if scheduler:
        probe_scheduler(scheduler, CONNECT_SECONDS)
        try:
            client = Client(scheduler, timeout=CONNECT_SECONDS)
        except (OSError, ValueError, TypeError) as error:       # no scheduler there, or not an address
            raise InputError("--scheduler", scheduler, f"{ALLOWED} ({error})") from None
        with client:
            yield client
        return
    with LocalCluster(n_workers=workers or os.cpu_count(), threads_per_worker=1, processes=True,
                      silence_logs=logging.WARNING, dashboard_address=":0") as cluster, Client(cluster) as client:
        yield client


def run_sweep(model: Path, calibration: Path | None, *, base: HardwareConfig, axes: list[Axis],
              compress: str | None = None, options: QuantOptions = QuantOptions(), scheduler: str | None = None,
              workers: int | None = None, cache_folder: Path | None = None, progress: bool = False,
              threads: int = 1, model_label: str | None = None, calibration_label: str | None = None) -> Sweep:
    """Every configuration of the grid, from the cache where it has it, the others on Dask. The model is
    quantized (once) only when something is left to compute."""
    from distributed import as_completed
    from tqdm import tqdm

    started = time.perf_counter()
    points = grid(base, axes)
    identity = program_identity(model, calibration, options, compress)
    cache = Cache(cache_folder, identity) if cache_folder is not None else None
    figures: dict[int, dict] = {index: _failed(point.refused) for index, point in enumerate(points) if point.refused}
    if cache is not None:
        for index, point in enumerate(points):
            if point.config is not None and (found := cache.load(point.config.config_hash())) is not None:
                figures[index] = found
    todo = [index for index in range(len(points)) if index not in figures]
    if scheduler and not todo:          # all cached: the address is still checked, as a fresh sweep would
        probe_scheduler(scheduler, CONNECT_SECONDS)
    if todo:
        from aipu.compiler.driver import quantize_model

        with dask_client(scheduler, workers) as client:          # first: a wrong --scheduler fails fast
            _, qmodel, _ = quantize_model(model, calibration, options=options, progress=progress, threads=threads)
            shared = client.scatter(qmodel, broadcast=True)
            futures = {client.submit(measure, shared, points[index].config, compress, pure=False): index
                       for index in todo}
            with tqdm(total=len(futures), desc="sweep", unit="config", file=sys.stderr, disable=not progress) as bar:
                for future in as_completed(futures):
                    index = futures[future]
                    figures[index] = future.result()
                    if cache is not None:
                        cache.store(points[index].config.config_hash(), figures[index])
                    bar.update()
    rows = [{"label": point.label, **point.settings, **{name: figures[index][name] for name in FIGURES[:-1]},
             "config_hash": point.config.config_hash() if point.config else None, "error": figures[index]["error"]}
            for index, point in enumerate(points)]
    calibration_label = calibration_label or (str(calibration) if calibration else None)
    return Sweep(model_label or str(model), calibration_label, compress, identity, base, axes, rows,
                 [points[index].label for index in todo], time.perf_counter() - started)

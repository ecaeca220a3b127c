"""`aipu rtl run`, `aipu rtl verify`, `aipu rtl verilog`, `aipu rtl synth` and `aipu rtl pnr`: a compiled
program on the RTL, checked against the interpreter and the cycle model; a user's Verilog unit checked the same
way; the RTL units as Verilog files, their size, memories and logic depth; the NPU placed and routed on an
ECP5."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from aipu.app.cli_program import at_most, positive_int
from aipu.sim.machine.arch import DEFAULT, load_hardware_config

DEFAULT_DRAM_BYTES = 1 << 16
DEFAULT_COMMANDS = 200     # `aipu rtl verify`: random commands per stimulus family
MAX_COMMANDS = 4096        # a queue of the System's build holds them all: its size grows with them
MAX_LAYERS = 100
SYSTEM = "system"      # `aipu rtl synth --unit system`: the System test harness with every unit, only when asked
NPU = "npu"            # `aipu rtl synth --unit npu`: the NPU top, in the default set
PNR_DEVICE = "85k"     # `aipu rtl pnr`: the largest LFE5U
PNR_FREQ_MHZ = 100.0
PNR_MAPPER = "abc9"    # sim/cosim/ecp5.py's DEFAULT_MAPPER (not imported here: it brings Amaranth in)


def _config(args: argparse.Namespace):
    return load_hardware_config(args.config) if args.config else DEFAULT


def _cmd_verilog(args: argparse.Namespace) -> int:
    from aipu.rtl.system import System
    from aipu.sim.cosim.verilog import (NPU_TOPLEVEL, TOPLEVEL, available_units, compact_zero_init, npu_verilog,
                                        preloaded_memories, system_verilog, unit_verilog)

    config = _config(args)
    units = available_units()
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    for unit, unit_class in units.items():
        path = output / f"{unit.name.lower()}.v"
        path.write_text(unit_verilog(unit_class, config))
        print(f"{path}: {unit.name} ({unit_class.__module__}.{unit_class.__qualname__})")
    path = output / f"{NPU_TOPLEVEL}.v"
    path.write_text(npu_verilog(config))
    print(f"{path}: the NPU top (host registers on s_axil_*, DRAM on the AXI4 master m_axi_*, irq; docs/rtl.md)")
    path = output / f"{TOPLEVEL}.v"
    system = System(config, list(units.values()), program_depth=config.queues.command_depth,
                    dram_bytes=args.dram_bytes)
    path.write_text(compact_zero_init(system_verilog(system), preloaded_memories(units.values())))
    print(f"{path}: System top with {len(units)} units, {config.queues.command_depth} commands per queue, "
          f"{args.dram_bytes} bytes of DRAM model; +aipu_preload_<memory>=<file> loads a memory ($readmemh)")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from aipu.rtl.system import System
    from aipu.sim.cosim.synth import npu_report, report, unit_report
    from aipu.sim.cosim.verilog import TOPLEVEL, available_units

    config = _config(args)
    units = available_units()
    names = [*(unit.name.lower() for unit in units), NPU, SYSTEM]
    unknown = set(args.unit or ()) - set(names)
    if unknown:
        raise ValueError(f"--unit {', '.join(sorted(unknown))}: expected one of {', '.join(names)}")
    chosen = [name for name in names if name in args.unit] if args.unit else [n for n in names if n != SYSTEM]
    result = {"config": config.to_dict(), "units": {}}
    for unit, unit_class in units.items():
        if unit.name.lower() in chosen:
            result["units"][unit.name.lower()] = unit_report(unit_class, config)
    if NPU in chosen:
        result["units"][NPU] = npu_report(config)
    if SYSTEM in chosen:
        system = System(config, list(units.values()), program_depth=config.queues.command_depth,
                        dram_bytes=args.dram_bytes)
        result["units"][SYSTEM] = report(system, TOPLEVEL)
    text = json.dumps(result, indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    crowded = [f"{name}: {memory}" for name, figures in result["units"].items()
               for memory in figures["memories_over_two_ports"]]
    for line in crowded:
        print(f"memory with more than two ports: {line}", file=sys.stderr)
    return 1 if crowded and args.check_ports else 0


def _cmd_pnr(args: argparse.Namespace) -> int:
    from aipu.rtl.npu import Npu
    from aipu.sim.cosim.ecp5 import DEVICES, MAX_FREQ_MHZ, SCRIPTS, pnr_report
    from aipu.sim.cosim.verilog import available_units

    units = {unit.name.lower(): unit_class for unit, unit_class in available_units().items()}
    if args.unit != NPU and args.unit not in units:
        raise ValueError(f"--unit {args.unit!r}: expected one of {', '.join([NPU, *units])}")
    if args.device not in DEVICES:
        raise ValueError(f"--device {args.device!r}: expected one of {', '.join(DEVICES)}")
    if args.mapper not in SCRIPTS:
        raise ValueError(f"--mapper {args.mapper!r}: expected one of {', '.join(SCRIPTS)}")
    try:
        freq = float(args.freq)
    except ValueError:
        freq = float("nan")
    if not 0 < freq <= MAX_FREQ_MHZ:
        raise ValueError(f"--freq {args.freq}: expected a target in MHz above 0, at most {MAX_FREQ_MHZ:g}")
    config = _config(args)
    component = Npu(config) if args.unit == NPU else units[args.unit](config)
    try:
        result = pnr_report(component, device=args.device, freq_mhz=freq, seed=args.seed,
                            place=not args.synth_only, mapper=args.mapper)
    except RuntimeError as exc:      # the tools failed: the design does not fit the device, most often
        print(f"aipu rtl pnr: {args.unit}: {exc}", file=sys.stderr)
        return 1
    result = {"unit": args.unit, "config": config.to_dict(), **result}
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print("\n".join(_pnr_lines(result)))
    return 0


def _pnr_lines(result: dict) -> list[str]:
    synthesis, seconds = result["synthesis"], result["seconds"]
    lines = [f"{result['unit']} on {result['device']}, target {result['target_mhz']:g} MHz "
             f"({result['chain_flip_flops']} port bits in the pin chains)",
             f"synth_ecp5 ({result['mapper']} mapping): {synthesis['luts']} LUT4, "
             f"{synthesis['flip_flops']} flip-flops, {synthesis['block_rams']} DP16KD, {synthesis['dsps']} MULT18X18D, "
             f"{synthesis['lut_rams']} TRELLIS_DPR16X4"]
    if "fmax" in result:
        used = result["utilization"]
        lines.append(f"fmax: {result['fmax']['mhz']:g} MHz")
        lines += [f"{kind}: {figures['used']} of {figures['available']}" for kind, figures in used.items()]
    lines.append("seconds: " + ", ".join(f"{step} {value:g}" for step, value in seconds.items()))
    return lines


def _cmd_run(args: argparse.Namespace) -> int:
    from aipu.app.rtl_run import TOPS, run_program_dir
    from aipu.sim.cosim.cocotb_run import BACKENDS

    if args.sim not in BACKENDS:
        raise ValueError(f"--sim {args.sim!r}: expected one of {', '.join(BACKENDS)}")
    if args.top not in TOPS:
        raise ValueError(f"--top {args.top!r}: expected one of {', '.join(TOPS)}")
    if args.threads > 1 and (args.sim, args.top) != ("verilator", "npu"):
        raise ValueError(f"--threads {args.threads}: only the NPU top on verilator runs on more than one thread")
    profiled = (args.sim, args.top) == ("verilator", "npu") and not args.plain_build
    report = run_program_dir(args.program, inputs=args.input, backend=args.sim, max_cycles=args.max_cycles,
                             waves=args.waves, top=args.top, threads=args.threads, profiled=profiled)
    _print_report(report, args.json)
    return 0 if report.agrees else 1


def _print_report(report, as_json: bool) -> None:
    """A run's or a verification's report on stdout: as JSON, or as its lines of text."""
    if as_json:
        json.dump(report.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print("\n".join(report.lines()))


def _cmd_verify(args: argparse.Namespace) -> int:
    from aipu.app.rtl_verify import default_top, verify_unit
    from aipu.sim.cosim.foreign import foreign_unit
    from aipu.sim.cosim.verilog import SIMULATORS, BuildError, available_units

    units = {unit.name.lower(): (unit, cls) for unit, cls in available_units().items()}
    if args.unit not in units:
        raise ValueError(f"--unit {args.unit!r}: expected one of {', '.join(units)}")
    if args.sim not in SIMULATORS:
        raise ValueError(f"--sim {args.sim!r}: expected one of {', '.join(SIMULATORS)}")
    unit, unit_class = units[args.unit]
    config = _config(args)
    foreign = foreign_unit(unit_class, config, args.verilog, args.top or default_top(unit))
    try:
        report = verify_unit(unit, foreign, config, commands=args.commands, seed=args.seed, backend=args.sim,
                             verilog=Path(args.verilog), layers=args.layers, values_only=args.values_only)
    except BuildError as exc:      # the user's module parsed but does not build with the System
        path = Path(args.verilog).resolve()
        first = re.sub(r"\S*/foreign_\w+\.v", str(path), exc.first_error)   # the build's copy of the file
        raise ValueError(f"{path}: {args.sim} cannot build the NPU with module {foreign.TOP} in it: {first}") from None
    _print_report(report, args.json)
    return 0 if report.passes else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    rtl = subparsers.add_parser("rtl", help="the RTL: a compiled program on it, Verilog export, synthesis figures")
    commands = rtl.add_subparsers(dest="rtl_command", metavar="RTL_COMMAND", required=True)

    run = commands.add_parser("run", help="run a compiled program directory on the RTL; compare every byte with the "
                                          "interpreter and every command's cycles with the cycle model")
    run.add_argument("program", help="directory written by `aipu compile` (its program fixes the configuration)")
    run.add_argument("--input", help=".npy or .npz of float inputs, [samples, ...], one run each (as `aipu run`); "
                                     "default: one run on the DRAM image as compiled")
    run.add_argument("--sim", default="verilator", help="amaranth, verilator (default) or icarus")
    run.add_argument("--top", default="npu",
                     help="npu (default: the NPU top, started over its host registers, its commands fetched and its "
                          "data moved through one AXI master) or system (the test harness: queues and buffers "
                          "loaded by backdoor, a DRAM port per DMA unit)")
    run.add_argument("--max-cycles", type=positive_int,
                     help="stop the RTL after this many cycles (default: twice the cycle model's count plus 1000)")
    run.add_argument("--threads", type=positive_int, default=1,
                     help="threads of the NPU's Verilator model (default 1; its own build): faster with that many "
                          "cores free, far slower without")
    run.add_argument("--plain-build", action="store_true",
                     help="build the NPU's Verilator model in one pass (default: profile-guided, compiled again "
                          "for what a run of sample layers executes: a longer first build, faster runs)")
    run.add_argument("--waves", action="store_true",
                     help="on a divergence, a waveform of the cycles around it (path in the report)")
    run.add_argument("--json", action="store_true", help="print the report as JSON (docs/rtl-cosim.md)")
    run.set_defaults(func=_cmd_run)

    verify = commands.add_parser("verify", help="your own Verilog module in one unit's place: its random stimulus "
                                                "against the interpreter and the cycle model")
    verify.add_argument("--unit", required=True, help="the unit it replaces (lower-case name: conv, pool, ...)")
    verify.add_argument("--verilog", required=True, help="the Verilog file with the module (ports: docs/rtl.md)")
    verify.add_argument("--top", help="the module's name (default: aipu_<unit>, as `aipu rtl verilog` names it)")
    verify.add_argument("--config", help="hardware configuration (.toml/.json); default: the built-in one")
    verify.add_argument("--commands", type=at_most(MAX_COMMANDS), default=DEFAULT_COMMANDS,
                        help=f"random commands per stimulus family of the unit (default {DEFAULT_COMMANDS})")
    verify.add_argument("--layers", type=at_most(MAX_LAYERS), default=0,
                        help="then this many random conv layers lowered by the compiler, on the System of every "
                             "unit (default none; the first run builds that System: minutes)")
    verify.add_argument("--seed", type=int, default=0, help="seed of the random stimulus and layers (default 0)")
    verify.add_argument("--sim", default="verilator", help="verilator (default) or icarus")
    verify.add_argument("--values-only", action="store_true",
                        help="pass when every byte agrees even if cycles differ from the cycle model")
    verify.add_argument("--json", action="store_true", help="print the report as JSON (docs/rtl-cosim.md)")
    verify.set_defaults(func=_cmd_verify)

    verilog = commands.add_parser("verilog", help="write the Verilog of every unit, of the NPU top and of the System "
                                                  "test harness")
    verilog.add_argument("-o", "--output", required=True,
                         help="directory for <unit>.v, aipu_npu.v and aipu_system.v")
    verilog.add_argument("--config", help="hardware configuration (.toml/.json); default: the built-in one")
    verilog.add_argument("--dram-bytes", type=positive_int, default=DEFAULT_DRAM_BYTES,
                         help=f"size of the System's DRAM model (default {DEFAULT_DRAM_BYTES})")
    verilog.set_defaults(func=_cmd_verilog)

    synth = commands.add_parser("synth", help="logic cells, memories and longest combinational path of each unit "
                                              "and of the NPU top (JSON)")
    synth.add_argument("--config", help="hardware configuration (.toml/.json); default: the built-in one")
    synth.add_argument("--unit", action="append",
                       help=f"only this unit (lower-case name, {NPU} for the NPU top, {SYSTEM} for the System "
                            f"test harness, which is not in the default set; repeatable)")
    synth.add_argument("--dram-bytes", type=positive_int, default=DEFAULT_DRAM_BYTES,
                       help=f"size of the System's DRAM model (default {DEFAULT_DRAM_BYTES})")
    synth.add_argument("--check-ports", action="store_true",
                       help="exit with status 1 when a memory has more than two ports (they are listed on stderr)")
    synth.add_argument("-o", "--output", help="write the JSON report here instead of stdout")
    synth.set_defaults(func=_cmd_synth)

    pnr = commands.add_parser("pnr", help="synthesis for a Lattice ECP5 and place and route: fmax, LUT4s, "
                                          "flip-flops, block RAMs, multipliers")
    pnr.add_argument("--config", help="hardware configuration (.toml/.json); default: the built-in one")
    pnr.add_argument("--unit", default=NPU, help=f"{NPU} (default: the NPU top) or one unit (lower-case name)")
    pnr.add_argument("--device", default=PNR_DEVICE, help=f"25k, 45k or 85k: LFE5U-25F, -45F or -85F (default "
                                                            f"{PNR_DEVICE})")
    pnr.add_argument("--freq", default=str(PNR_FREQ_MHZ),
                     help=f"target clock in MHz (default {PNR_FREQ_MHZ:g}); fmax is reported whether met or not")
    pnr.add_argument("--seed", type=int, default=1, help="nextpnr's placement seed (default 1)")
    pnr.add_argument("--mapper", default=PNR_MAPPER,
                     help=f"LUT mapping: abc9 (Yosys's default, timing-driven) or abc (classic ABC, much faster on "
                          f"large designs; default {PNR_MAPPER})")
    pnr.add_argument("--synth-only", action="store_true", help="stop after synth_ecp5: its figures only")
    pnr.add_argument("--json", action="store_true", help="print the report as JSON (docs/rtl-cosim.md)")
    pnr.set_defaults(func=_cmd_pnr)

"""`aipu rtl run`, `aipu rtl verify`, `aipu rtl verilog` and `aipu rtl synth`: a compiled program on the RTL,
checked against the interpreter and the cycle model; a user's Verilog unit checked the same way; the RTL units
as Verilog files, their size, memories and logic depth."""
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
SYSTEM = "system"      # `aipu rtl synth --unit system`: the System top with every unit


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
    from aipu.sim.cosim.synth import report, unit_report
    from aipu.sim.cosim.verilog import TOPLEVEL, available_units

    config = _config(args)
    units = available_units()
    names = [*(unit.name.lower() for unit in units), SYSTEM]
    unknown = set(args.unit or ()) - set(names)
    if unknown:
        raise ValueError(f"--unit {', '.join(sorted(unknown))}: expected one of {', '.join(names)}")
    chosen = [name for name in names if not args.unit or name in args.unit]
    result = {"config": config.to_dict(), "units": {}}
    for unit, unit_class in units.items():
        if unit.name.lower() in chosen:
            result["units"][unit.name.lower()] = unit_report(unit_class, config)
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


def _cmd_run(args: argparse.Namespace) -> int:
    from aipu.app.rtl_run import TOPS, run_program_dir
    from aipu.sim.cosim.cocotb_run import BACKENDS

    if args.sim not in BACKENDS:
        raise ValueError(f"--sim {args.sim!r}: expected one of {', '.join(BACKENDS)}")
    if args.top not in TOPS:
        raise ValueError(f"--top {args.top!r}: expected one of {', '.join(TOPS)}")
    report = run_program_dir(args.program, inputs=args.input, backend=args.sim, max_cycles=args.max_cycles,
                             waves=args.waves, top=args.top)
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
                                              "and of the System top (JSON)")
    synth.add_argument("--config", help="hardware configuration (.toml/.json); default: the built-in one")
    synth.add_argument("--unit", action="append",
                       help=f"only this unit (lower-case name, or {SYSTEM} for the System top; repeatable)")
    synth.add_argument("--dram-bytes", type=positive_int, default=DEFAULT_DRAM_BYTES,
                       help=f"size of the System's DRAM model (default {DEFAULT_DRAM_BYTES})")
    synth.add_argument("--check-ports", action="store_true",
                       help="exit with status 1 when a memory has more than two ports (they are listed on stderr)")
    synth.add_argument("-o", "--output", help="write the JSON report here instead of stdout")
    synth.set_defaults(func=_cmd_synth)

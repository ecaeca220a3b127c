"""`aipu rtl verilog` and `aipu rtl synth`: the RTL units as Verilog files and their size and logic depth."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aipu.app.cli_program import positive_int
from aipu.sim.machine.arch import DEFAULT, load_hardware_config

DEFAULT_DRAM_BYTES = 1 << 16


def _config(args: argparse.Namespace):
    return load_hardware_config(args.config) if args.config else DEFAULT


def _cmd_verilog(args: argparse.Namespace) -> int:
    from aipu.rtl.system import System
    from aipu.sim.cosim.verilog import (TOPLEVEL, available_units, compact_zero_init, preloaded_memories,
                                        system_verilog, unit_verilog)

    config = _config(args)
    units = available_units()
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    for unit, unit_class in units.items():
        path = output / f"{unit.name.lower()}.v"
        path.write_text(unit_verilog(unit_class, config))
        print(f"{path}: {unit.name} ({unit_class.__module__}.{unit_class.__qualname__})")
    path = output / f"{TOPLEVEL}.v"
    system = System(config, list(units.values()), program_depth=config.queues.command_depth,
                    dram_bytes=args.dram_bytes)
    path.write_text(compact_zero_init(system_verilog(system), preloaded_memories(units.values())))
    print(f"{path}: System top with {len(units)} units, {config.queues.command_depth} commands per queue, "
          f"{args.dram_bytes} bytes of DRAM model; +aipu_preload_<memory>=<file> loads a memory ($readmemh)")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from aipu.sim.cosim.synth import unit_report
    from aipu.sim.cosim.verilog import available_units

    config = _config(args)
    units = available_units()
    chosen = {unit: cls for unit, cls in units.items() if not args.unit or unit.name.lower() in args.unit}
    unknown = set(args.unit or ()) - {unit.name.lower() for unit in units}
    if unknown:
        raise ValueError(f"--unit {', '.join(sorted(unknown))}: expected one of "
                         f"{', '.join(unit.name.lower() for unit in units)}")
    report = {"config": config.to_dict(), "units": {}}
    for unit, unit_class in chosen.items():
        report["units"][unit.name.lower()] = unit_report(unit_class, config)
    text = json.dumps(report, indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    rtl = subparsers.add_parser("rtl", help="the RTL units: Verilog export and synthesis figures")
    commands = rtl.add_subparsers(dest="rtl_command", metavar="RTL_COMMAND", required=True)

    verilog = commands.add_parser("verilog", help="write the Verilog of every unit and of the System top")
    verilog.add_argument("-o", "--output", required=True, help="directory for <unit>.v and aipu_system.v")
    verilog.add_argument("--config", help="hardware configuration (.toml/.json); default: the built-in one")
    verilog.add_argument("--dram-bytes", type=positive_int, default=DEFAULT_DRAM_BYTES,
                         help=f"size of the System's DRAM model (default {DEFAULT_DRAM_BYTES})")
    verilog.set_defaults(func=_cmd_verilog)

    synth = commands.add_parser("synth", help="cells and longest combinational path of each unit (JSON)")
    synth.add_argument("--config", help="hardware configuration (.toml/.json); default: the built-in one")
    synth.add_argument("--unit", action="append", help="only this unit (lower-case name; repeatable)")
    synth.add_argument("-o", "--output", help="write the JSON report here instead of stdout")
    synth.set_defaults(func=_cmd_synth)

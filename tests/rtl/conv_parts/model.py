"""What CONV's parts should compute for a command, from docs/rtl-conv.md in plain Python: the geometry the
setups register (CONV's and DWCONV's) and the blocks in the order the block walk visits them."""
from __future__ import annotations

from aipu.sim.machine.arch import DType, HardwareConfig, elements_bytes, mac_lanes
from aipu.sim.machine.program import Command
from aipu.sim.timing.conv import ConvTiming, DepthwiseTiming, conv_output_size, depthwise_positions


def command_word(config: HardwareConfig, command: Command) -> int:
    """The command as the integer a part's ``command`` port holds."""
    return int.from_bytes(command.encode(config), "little")


def geometry_of(config: HardwareConfig, command: Command) -> dict[str, int]:
    c, rows, cols = command.args, config.mac.rows, config.mac.cols
    w_type, in_type = DType(c["w_type"]), DType(c["in_type"])
    lanes = mac_lanes(w_type)
    group_in, group_out = c["in_c"] // c["groups"], c["out_c"] // c["groups"]
    out_h, out_w = conv_output_size(command)
    timing = ConvTiming.of(config, w_type, in_type)
    groups_per_block = config.mac.groups_per_block(group_in, group_out, lanes)
    pixel = elements_bytes(c["in_c"], in_type)
    return dict(int4_weights=int(w_type == DType.INT4), int4_inputs=int(in_type == DType.INT4), beats=timing.beats,
                group_in=group_in, group_out=group_out, out_w=out_w,
                weights_per_out_channel=elements_bytes(c["k_h"] * c["k_w"] * group_in, w_type),
                pixel_cycles=out_h * out_w * timing.beats, block_cycles=timing.block_cycles(config, out_h * out_w),
                step_x=c["stride_w"] * pixel, step_y=c["stride_h"] * c["in_w"] * pixel,
                tap_x=c["dilation_w"] * pixel, tap_y=c["dilation_h"] * c["in_w"] * pixel,
                in_chunks_last=(group_in - 1) // (lanes * rows), out_chunks_last=(group_out - 1) // cols,
                groups_per_block=groups_per_block, block_group_cols=groups_per_block * group_out)


def depthwise_geometry_of(config: HardwareConfig, command: Command) -> dict[str, int]:
    """What DepthwiseSetup registers for a legal DWCONV (docs/rtl-conv.md, "Depthwise dataflow")."""
    c = command.args
    out_h, out_w = conv_output_size(command)
    plane_h, plane_w = -(-c["in_h"] // c["stride_h"]), -(-c["in_w"] // c["stride_w"])
    positions = depthwise_positions(out_h, out_w, plane_w)
    timing = DepthwiseTiming.of(config, c["channels"], positions)
    taps = c["k_h"] * c["k_w"]
    return dict(plane_w=plane_w, plane_bytes=plane_h * plane_w * c["channels"], out_w=out_w, outputs=out_h * out_w,
                positions=positions, cols_mod_w=config.mac.cols % plane_w, tap_beats=timing.tap_beats,
                tap_cycles=taps * timing.tap_beats, drain_beats=timing.drain_beats, period=timing.block_cycles(taps))


def blocks_of(config: HardwareConfig, command: Command) -> list[dict[str, int]]:
    """Every block: groups side by side, out-channel chunk, tap (ky, kx), in-channel chunk innermost; addresses
    in bytes of the operands' types."""
    c, cols = command.args, config.mac.cols
    w_type, in_type = DType(c["w_type"]), DType(c["in_type"])
    chunk = mac_lanes(w_type) * config.mac.rows
    g = geometry_of(config, command)
    group_in, group_out, side_by_side = g["group_in"], g["group_out"], g["groups_per_block"]
    blocks = []
    for group in range(0, c["groups"], side_by_side):
        block_out = min(c["groups"] - group, side_by_side) * group_out
        for out_chunk in range(0, group_out, cols):
            for ky in range(c["k_h"]):
                for kx in range(c["k_w"]):
                    for in_chunk in range(0, group_in, chunk):
                        out_channel = group * group_out + out_chunk
                        rows = min(group_in - in_chunk, chunk)
                        blocks.append(dict(
                            act=(c["in_addr"] + ky * g["tap_y"] + kx * g["tap_x"]
                                 + elements_bytes(group * group_in + in_chunk, in_type)),
                            acc=c["acc_addr"] + out_channel,
                            weights=(c["wgt_addr"] + out_channel * g["weights_per_out_channel"]
                                     + elements_bytes((ky * c["k_w"] + kx) * group_in + in_chunk, w_type)),
                            rows=rows, cols=min(block_out - out_chunk, cols),
                            act_bytes=elements_bytes(rows * min(c["groups"] - group, side_by_side), in_type),
                            overwrites=int(not c["accumulate"] and ky == kx == in_chunk == 0), last=0))
    blocks[-1]["last"] = 1
    return blocks


def set_members(ctx, interface, values: dict[str, int]) -> None:
    for name, value in values.items():
        ctx.set(getattr(interface, name), value)

"""The npu profile's checked elements (docs/codec.md §11): the header fields and the flags of every CTU."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.codec.npu_profile import (CONTINUATION_HEADER, PROFILE_CTU_FLAGS, PROFILE_CU_FLAGS, PROFILE_HEADER,
                                   PROFILE_SPLIT_FLAG)
from aipu.codec.reference.elements import NUM_CONTEXTS, element_spec
from aipu.rtl.wdec_parts.interfaces import command_field, context_index
from aipu.sim.machine.arch import HardwareConfig

SHAPE_FIELDS = {"R": "k_h", "S": "k_w", "C": "in_c", "K": "out_c"}   # sublayer_shape's axes: the command's fields


class HeaderFields(wiring.Component):
    """The stream and layer headers: bypass FL fields, each checked as its last bin is decoded against the
    profile's value or the command's shape (the field that disagrees is the fault); the step size's zero
    bit depth of a float layer is a ``stream`` fault. Keeps max_ctu3d_idx for the leaf walk. A
    ``continuation`` part's decoder reads CONTINUATION_HEADER instead (max_ctu3d_idx alone).

    Signature: ``begin`` (In: a stream begins), ``decoded``/``bin`` (In: a header bin), the command's
    ``k_h``, ``k_w``, ``in_c``, ``out_c`` (In), ``complete`` (Out: the bin ended the header),
    ``fault``/``fault_field`` (Out: the bin ended a field the profile or the command refuses),
    ``ctu_size_idx`` (Out: max_ctu3d_idx).
    """

    def __init__(self, config: HardwareConfig, error_names: tuple[str, ...], continuation: bool = False):
        self.error_names = error_names
        self.continuation = continuation
        self.fields = CONTINUATION_HEADER if continuation else PROFILE_HEADER
        super().__init__({"begin": In(1), "decoded": In(1), "bin": In(1),
                          **{name: In(command_field(config, name)) for name in SHAPE_FIELDS.values()},
                          "complete": Out(1), "fault": Out(1), "fault_field": Out(range(len(error_names))),
                          "ctu_size_idx": Out(2)})

    def elaborate(self, platform) -> Module:
        m = Module()
        field = Signal(range(len(self.fields) + 1))
        field_bit = Signal(6)
        value = Signal(32)
        integer_input, cmaxw_nonzero = Signal(), Signal()

        def refuse(name):
            m.d.comb += [self.fault.eq(1), self.fault_field.eq(self.error_names.index(name))]

        with m.If(self.decoded):
            accumulated = Cat(self.bin, value[:31])
            m.d.sync += [value.eq(accumulated), field_bit.eq(field_bit + 1)]
            with m.Switch(field):
                for index, (name, wanted) in enumerate(self.fields):
                    with m.Case(index):
                        length = element_spec(name).fixed_length
                        with m.If(field_bit == length - 1):
                            m.d.sync += [field.eq(index + 1), field_bit.eq(0), value.eq(0)]
                            if name == "integer_input":
                                m.d.sync += integer_input.eq(accumulated[0])
                            elif name == "max_ctu3d_idx":
                                m.d.sync += self.ctu_size_idx.eq(accumulated[:2])
                            elif name == "sublayer_cmaxw":
                                m.d.sync += cmaxw_nonzero.eq(accumulated != 0)
                            if isinstance(wanted, str):
                                with m.If(accumulated[:length] != getattr(self, SHAPE_FIELDS[wanted])):
                                    refuse(SHAPE_FIELDS[wanted])
                            elif wanted is not None:
                                with m.If(accumulated[:length] != wanted):
                                    refuse("profile")
                            if index == len(self.fields) - 1 and self.continuation:
                                m.d.comb += self.complete.eq(1)
                            elif index == len(self.fields) - 1:
                                with m.If(~integer_input & cmaxw_nonzero & (accumulated[:length] == 0)):
                                    refuse("stream")
                                with m.Else():
                                    m.d.comb += self.complete.eq(1)
        with m.If(self.begin):
            m.d.sync += [field.eq(0), field_bit.eq(0), value.eq(0)]
        return m


class CtuFlags(wiring.Component):
    """The flags at the start of every CTU, each context-coded with the value the profile fixes:
    select_map_mode_flag, map_mode_flag, enable_start_depth, split_flag (only in a CTU larger than a
    minimum CU), signalled_size, uni_mode.

    Signature: ``begin`` (In: a CTU begins), ``split_coded`` (In: it codes split_flag), ``context`` (Out:
    ctxIdx of the next flag), ``decoded``/``bin`` (In: that flag), ``mismatch`` (Out: the bin is not the
    profile's), ``complete`` (Out: it was the CTU's last flag).
    """

    def __init__(self):
        super().__init__({"begin": In(1), "split_coded": In(1), "context": Out(range(NUM_CONTEXTS)),
                          "decoded": In(1), "bin": In(1), "mismatch": Out(1), "complete": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        ctu_flags = [(context_index(name, "1" if name == "map_mode_flag" else "0")
                      + (1 if name == "map_mode_flag" else 0), wanted) for name, wanted in PROFILE_CTU_FLAGS]
        split_name, split_wanted = PROFILE_SPLIT_FLAG
        tail_flags = [(context_index(name, "0"), wanted) for name, wanted in PROFILE_CU_FLAGS]
        flags = ctu_flags + [(context_index(split_name, "0"), split_wanted)] + tail_flags
        step = Signal(range(len(PROFILE_CTU_FLAGS) + 4))
        expected = Signal()
        with m.Switch(step):
            for index, (ctx, wanted) in enumerate(flags):
                with m.Case(index):
                    m.d.comb += [self.context.eq(ctx), expected.eq(wanted)]
        with m.If(self.decoded):
            with m.If(self.bin != expected):
                m.d.comb += self.mismatch.eq(1)
            with m.Elif(step == len(flags) - 1):
                m.d.comb += self.complete.eq(1)
            with m.Elif((step == len(ctu_flags) - 1) & ~self.split_coded):
                m.d.sync += step.eq(step + 2)
            with m.Else():
                m.d.sync += step.eq(step + 1)
        with m.If(self.begin):
            m.d.sync += step.eq(0)
        return m

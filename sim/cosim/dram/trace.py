"""Handshake traces of an AXI4 port and the check of a trace against the DRAM's timing rules.

:func:`trace_cycle` turns one cycle's signals (as sampled at a rising edge) into events, the same text whichever
simulator sampled them, so traces of the DRAM's forms compare line for line. An event is ``"<cycle> <kind>
<fields>"``: ``AR``/``AW`` id address len, ``R`` id resp last data, ``W`` last strobe data, ``B`` id resp, and a
stall (valid without ready) ``ARS``, ``AWS``, ``WS``, ``RS``, ``BS``. :func:`check_trace` names every event that
breaks the rules of :mod:`aipu.sim.cosim.dram.model` for the given parameters.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict

from aipu.sim.cosim.dram.model import DramParams

CHANNELS = (("AR", ("arid", "araddr", "arlen")), ("AW", ("awid", "awaddr", "awlen")),
            ("W", ("wlast", "wstrb", "wdata")), ("R", ("rid", "rresp", "rlast", "rdata")), ("B", ("bid", "bresp")))
HANDSHAKES = tuple((kind, f"{kind.lower()}valid", f"{kind.lower()}ready", fields) for kind, fields in CHANNELS)


def trace_cycle(cycle: int, sample) -> list[str]:
    """The events of one edge; ``sample(name)`` reads a signal (payloads are read only on a handshake)."""
    events = []
    for kind, valid, ready, fields in HANDSHAKES:
        if sample(valid):
            if sample(ready):
                events.append(" ".join([str(cycle), kind, *(f"{sample(name):x}" for name in fields)]))
            else:
                events.append(f"{cycle} {kind}S")
    return events


def _parse(events):
    by_kind = defaultdict(list)
    for event in events:
        cycle, kind, *fields = event.split()
        by_kind[kind].append((int(cycle), *(int(value, 16) for value in fields)))
    return by_kind


def _presented(handshakes, stalls) -> list[int]:
    """The edge each handshaken item was first offered at: its handshake less the stalls just before it."""
    stalled, edges = {cycle for cycle, *_ in stalls}, []
    for cycle, *_ in handshakes:
        first = cycle
        while first - 1 in stalled:
            first -= 1
        edges.append(first)
    return edges


def _open_at(starts, ends, edge: int) -> int:
    """Items started before ``edge`` and not ended before it (both lists in cycle order)."""
    return bisect_left(starts, edge) - bisect_left(ends, edge)


def check_trace(events, params: DramParams, *, acceptance: bool = True) -> list[str]:
    """Every break of the rules in a trace of one run from edge 0. ``acceptance=False`` leaves out the rules of
    ``arready``, ``awready`` and ``wready`` (a slave that accepts by other rules, as cocotbext-axi's AxiRam)."""
    ev, problems = _parse(events), []
    ars, rs, aws, ws, bs = ev["AR"], ev["R"], ev["AW"], ev["W"], ev["B"]
    offered = _presented(rs, ev["RS"])
    beat, burst, previous_end = 0, 0, None
    for (cycle, ident, resp, last, _), edge in zip(rs, offered):
        if burst >= len(ars):
            problems.append(f"{cycle} R without an AR")
            break
        ar_edge, _, _, length = ars[burst]
        want = max(ar_edge + params.read_latency, previous_end + 1 if previous_end is not None else 0) \
            if beat == 0 else previous_end + 1
        if edge != want:
            problems.append(f"{cycle} R beat {beat} of burst {burst} offered at {edge}, expected {want}")
        if last != (beat == length):
            problems.append(f"{cycle} R beat {beat} of burst {burst} (len {length}): rlast {last}")
        previous_end, beat = cycle, 0 if last else beat + 1
        burst += bool(last)
    wlasts = [cycle for cycle, last, *_ in ws if last]
    answered = None
    for k, ((cycle, *_), edge) in enumerate(zip(bs, _presented(bs, ev["BS"]))):
        want = max(max(aws[k][0], wlasts[k]) + params.write_latency, answered + 1 if answered is not None else 0)
        if edge != want:
            problems.append(f"{cycle} B {k} offered at {edge}, expected {want}")
        answered = cycle
    if acceptance:
        problems += _check_acceptance(ev, params)
    return problems


def _check_acceptance(ev, params: DramParams) -> list[str]:
    problems = []
    ar_edges, r_ends = [c for c, *_ in ev["AR"]], [c for c, _, _, last, _ in ev["R"] if last]
    aw_edges, b_edges = [c for c, *_ in ev["AW"]], [c for c, *_ in ev["B"]]
    w_ends = [c for c, last, *_ in ev["W"] if last]
    rules = (("AR", lambda e: _open_at(ar_edges, r_ends, e) < params.read_depth),
             ("AW", lambda e: _open_at(aw_edges, b_edges, e) < params.write_depth),
             ("W", lambda e: _open_at(aw_edges, w_ends, e) > 0))
    for kind, ready in rules:
        for cycle, *_ in ev[kind]:
            if not ready(cycle):
                problems.append(f"{cycle} {kind} accepted while the rules hold its ready low")
        for cycle, *_ in ev[kind + "S"]:
            if ready(cycle):
                problems.append(f"{cycle} {kind} stalled while the rules raise its ready")
    return problems

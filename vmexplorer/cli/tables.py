"""The commands' output: a table for people (the table_* of each command's document, their cells and
lines escaped), or the document as JSON for scripts."""

from __future__ import annotations

from . import _safe, _write_stdout

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable, Sequence
    from typing import Any

_TRANSFER_RATES = ("prefetch_bytes_per_ns", "evict_bytes_per_ns", "fault_bytes_per_ns", "host_block")
_SWAP_TRANSFER_RATES = ("swap_to_device_bytes_per_ns", "swap_to_host_bytes_per_ns")


def table_calibrate(doc: dict[str, Any]) -> str:
    from ..simulator.costmodel import fault_rates_by_kind_text

    r, kept = doc["rates"], set(doc["not_fitted"])
    kinds = fault_rates_by_kind_text(r["fault_bytes_per_ns_by_kind"])

    def rate(key: str, text: str) -> str:
        return text + (" (the default: not fitted)" if key in kept else "")

    swap = doc["config"].get("mechanism") == "swap"
    if kept >= set(_TRANSFER_RATES) | (set(_SWAP_TRANSFER_RATES) if swap else set()):
        rates = ("its transfer rates are the defaults, not fitted: the run moved nothing" if swap else
                 "its prefetch, eviction, demand-fault and host-blocking rates are the defaults, not fitted: "
                 "the run moved nothing")
    elif swap:  # its copies' rates (the uvm ones stay the base's)
        into, out = r["swap_to_device_bytes_per_ns"], r["swap_to_host_bytes_per_ns"]
        rates = ", ".join([rate("swap_to_device_bytes_per_ns", f"copies in {into:.1f} GB/s"),
                           rate("swap_to_host_bytes_per_ns", f"copies out {out:.1f} GB/s")])
    else:
        rates = ", ".join([rate("prefetch_bytes_per_ns", f"prefetch {r['prefetch_bytes_per_ns']:.1f} GB/s"),
                           rate("evict_bytes_per_ns", f"eviction {r['evict_bytes_per_ns']:.1f} GB/s"),
                           rate("fault_bytes_per_ns", f"demand faults {r['fault_bytes_per_ns']:.1f} GB/s"
                                + (f" (by op kind: {kinds})" if kinds else "")),
                           rate("host_block", f"host blocking {r['host_block']:.2f}")])
    text = (f"wrote {_safe(doc['path'])} with the cost model {_safe(repr(doc['cost_model']))}: "
            f"{doc['ops_timed']} op times"
            + (f" ({doc['ops_timed_by_workspace']} convolutions timed by their workspace)"
               if doc.get("ops_timed_by_workspace") else "") + f"; {rates}; "
            f"it simulates the session's own plan in {doc['simulated_iteration_ns'] / 1e6:.1f} ms per iteration "
            f"(measured {doc['measured_iteration_ns'] / 1e6:.1f} ms)")
    if doc.get("bound") is None:
        return text
    return f"{text}\n{_bound_line(doc['bound'], doc['measured_iteration_ns'], 'measured')} under its new rates"


def table_serve(doc: dict[str, Any]) -> str:
    which = f" (process {doc['process'] + 1} of {doc['processes']})" if doc.get("processes", 1) > 1 else ""
    return f"stopped serving {_safe(doc['url'])}{which}"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[_cell(h, v) for h, v in zip(headers, row)] for row in rows]
    raw_numeric = [True] * len(headers)
    for row in cells:
        for i, c in enumerate(row):
            raw_numeric[i] = raw_numeric[i] and (c[:1].isdigit() or c[:1] == "-")
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if num else h.ljust(w)
                       for h, w, num in zip(headers, widths, raw_numeric)).rstrip()]
    for row in cells:
        lines.append("  ".join(c.rjust(w) if num else c.ljust(w)
                               for c, w, num in zip(row, widths, raw_numeric)).rstrip())
    return "\n".join(lines)


def _cell(header: str, value: Any) -> str:
    from ..units import format_bytes, format_ns

    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _safe(value)  # a string from a file: a newline or an escape sequence would break the table
    if header.endswith("_ns") or header in ("time", "delta"):
        return format_ns(value)
    if "bytes" in header.split("_") or header in ("footprint", "min capacity"):
        return format_bytes(value)
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _pairs(d: dict[str, Any]) -> str:
    return _table(("key", "value"), ((k, _cell(k, v)) for k, v in sorted(d.items())))


def _title(text: str) -> str:
    return f"\n{text}\n{'-' * len(text)}"


def _config_line(c: dict[str, Any]) -> str:
    from ..units import format_bytes

    opts = "".join(f" {_flag(_safe(k))} {_safe(v)}" for k, v in sorted(c["options"].items()))
    return (f"{_safe(c['model'])} batch {c['batch']} at {c['image_size']}px, {_safe(c['policy'])}{opts} "
            f"through {_safe(c.get('mechanism', 'uvm'))}, capacity {format_bytes(c['capacity_bytes'])}")


def table_models(doc: dict[str, Any]) -> str:
    rows = [(m["name"], f"{m['param_count']:,}", m["ops"], m["tensors"], m["footprint_bytes"],
             m["min_capacity_bytes"]) for m in doc["models"]]
    skipped = "".join(f"\nnot at this size: {u['reason']}" for u in doc["unavailable"])
    return (f"models at batch {doc['batch']}, {doc['image_size']}x{doc['image_size']} images\n"
            + _table(("model", "params", "ops", "tensors", "footprint", "min capacity"), rows) + skipped)


def table_graph(doc: dict[str, Any]) -> str:
    t = doc["totals"]
    totals = {"footprint_bytes": t["footprint_bytes"], "min_capacity_bytes": t["min_capacity_bytes"],
              "min_capacity_op": t["min_capacity_op"]["name"], "param_count": f"{t['param_count']:,}",
              "flops": f"{t['flops']:,}", "ops": t["ops"], "tensors": t["tensors"],
              **{f"{k}_bytes": v for k, v in t["bytes_by_kind"].items()}}
    ops = ((o["index"], o["name"], o["phase"], o["kind"], f"{o['flops']:,}", o["bytes_touched"])
           for o in doc["ops"])
    tensors = ((x["index"], x["name"], x["kind"], "x".join(map(str, x["shape"])) or "scalar", x["nbytes"],
                x["producer"] or "(persistent)", ",".join(x["consumers"])) for x in doc["tensors"])
    return "\n".join([f"{doc['model']} batch {doc['batch']} at {doc['image_size']}px", _pairs(totals),
                      _title("ops"), _table(("#", "op", "phase", "kind", "flops", "bytes"), ops),
                      _title("tensors"),
                      _table(("#", "tensor", "kind", "shape", "bytes", "producer", "consumers"), tensors)])


def table_plan(doc: dict[str, Any]) -> str:
    from ..units import format_bytes

    p = doc["plan"]
    memops = ((m["tensor"], m["nbytes"], m["direction"], m["mode"], m["origin"],
               f"{m['issue_after_op'] or 'start'} ({m['issue_after']})",
               f"{m['complete_before_op'] or 'end'} ({m['complete_before']})") for m in p["memops"])
    head = (f"{_config_line(doc['config'])}; cost model {_safe(doc['cost_model'])}{_gpu_of(doc)}\n"
            f"{len(p['memops'])} memory operations, {len(p['moves'])} planned round trips, "
            f"{len(p['resident_at_start'])} tensors resident at start, "
            f"peak resident {format_bytes(p['peak_resident_bytes'])}\n"
            f"{_bound_line(doc['bound'], doc['summary'].get('iteration_ns'))}"
            + "".join(f"\n{_safe(n)}" for n in doc.get("notes", ())))
    return "\n".join([head, _title("simulated summary"), _pairs(doc["summary"]), _title("memory operations"),
                      _table(("tensor", "bytes", "direction", "mode", "origin", "issue after",
                              "complete before"), memops)])


def table_simulate(doc: dict[str, Any]) -> str:
    from ..units import format_ns

    s = doc["summary"]
    text = (f"wrote {_safe(doc['path'])}: {_config_line(doc['config'])}; "
            f"iteration {format_ns(s.get('iteration_ns', 0))} ({_safe(s.get('source', '?'))})")
    if doc.get("cost_model"):
        text += f"\ncost model {_safe(repr(doc['cost_model']))}{_gpu_of(doc)}"
    if s.get("recompute_ns"):  # the time a plan pays for not keeping what it recomputes
        text += f", {format_ns(s['recompute_ns'])} of it recomputing"
    if doc.get("bound") is not None:
        text += f"\n{_bound_line(doc['bound'], s.get('iteration_ns'), s.get('source', 'simulated'))}"
    return text + "".join(f"\n{_safe(n)}" for n in doc.get("notes", ()))


def _gpu_of(doc: dict[str, Any]) -> str:
    """" (GPU)" after a cost model's name, where the document says which GPU it describes."""
    return f" ({_safe(doc['cost_model_gpu'])})" if doc.get("cost_model_gpu") else ""


def _bound_line(bound: dict[str, Any], iteration_ns: float | None, source: str = "simulated") -> str:
    """The bound for people: "the simulated iteration is 1.4x the bound, set by migration bandwidth (any
    schedule moves at least 3.12 GiB each way and takes at least 469.12 ms)"."""
    from ..simulator.bound import Bound
    from ..units import format_ns

    b = Bound(**bound)
    head = "bound" if iteration_ns is None else f"the {_safe(source)} iteration is {b.versus(iteration_ns)}"
    return f"{head} (any schedule moves at least {_moved(b)} and takes at least {format_ns(b.lower_bound_ns)})"


def _moved(b: Any) -> str:
    from ..units import format_bytes

    out, into = b.min_bytes_to_host, b.min_bytes_to_device
    return f"{format_bytes(out)} each way" if out == into else \
        f"{format_bytes(out)} to the host and {format_bytes(into)} to the device"


def _info_bound_line(doc: dict[str, Any]) -> str:
    """The bound in `info`: "lower bound 469.12 ms, set by migration bandwidth (any schedule moves at least
    3.12 GiB each way, under the cost model 'h100-uncalibrated'); this measured iteration is 1.4x it"."""
    from ..simulator.bound import Bound
    from ..units import format_ns

    if doc["bound"] is None and doc.get("bound_cost_model") is None:
        return "lower bound: none (no cost model of the GPU it ran on: `vmexplorer calibrate` fits one)"
    if doc["bound"] is None:
        return "lower bound: none (the capacity is below what any plan needs)"
    b = Bound(**doc["bound"])
    text = (f"lower bound {format_ns(b.lower_bound_ns)}, set by {_safe(b.set_by)} (any schedule moves at least "
            f"{_moved(b)}, under the cost model {_safe(repr(doc['bound_cost_model']))}"
            + ("" if doc["bound_stored"] else "; worked out now, as the file stores none") + ")")
    iteration = doc["summary"].get("iteration_ns")
    if isinstance(iteration, int | float) and b.lower_bound_ns > 0:
        text += f"; this {_safe(doc['summary'].get('source', ''))} iteration is {iteration / b.lower_bound_ns:.1f}x it"
    return text


def _info_memory_lines(doc: dict[str, Any]) -> list[str]:
    """The room a swap plan was made in, where it is less than the capacity, and what a measured run took."""
    from ..units import format_bytes

    out = []
    capacity, room = doc["config"].get("capacity_bytes"), doc.get("room_bytes")
    if isinstance(capacity, int) and isinstance(room, int) and room < capacity:
        out.append(f"planned with {format_bytes(room)} of room ({room / capacity:.1%} of the capacity), so that the "
                   "swap pool holding it fits the capacity")
    if doc["config"].get("workspaces") is False:
        out.append("workspaces: outside the capacity (recorded before the kernels' workspaces were graph tensors, "
                   "schema 10 or older: the convolutions' scratch came on top of the capacity)")
    memory = doc.get("device_memory")
    if isinstance(memory, dict):
        out.append(f"device memory: {_safe(memory['line'])}")
    elif doc["summary"].get("source") == "measured":
        out.append("device memory: not recorded (a session of schema 9 or older: on the H100 and in the first H200 "
                   "samples, convolution workspaces lay outside the capacity)")
    return out


def table_info(doc: dict[str, Any]) -> str:
    env = doc["environment"] if isinstance(doc["environment"], dict) else {"environment": doc["environment"]}
    notes = "\n".join(f"- {_safe(n)}" for n in doc["notes"]) or "(none)"
    return "\n".join([_safe(doc["path"]), f"{_config_line(doc['config'])}",
                      f"created {_safe(doc['created'])}; cost model {_safe(doc['cost_model'] or '-')}",
                      _info_bound_line(doc), *_info_memory_lines(doc), _title("summary"), _pairs(doc["summary"]),
                      _title("environment"),
                      _pairs(env), _title("notes"), notes])


def table_compare(doc: dict[str, Any], top: int) -> str:
    described = doc.get("sessions") or [doc["a"], doc["b"]]
    n = len(described)
    names = [chr(ord("A") + k) for k in range(n)]
    summary = ((k, *(_cell(k, x) for x in v.get("values", [v["a"], v["b"]])),
                *("-" if r is None else f"{r:.3f}" for r in v.get("ratios", [v["ratio"]])))
               for k, v in doc["summary"].items())

    def deltas(r: dict[str, Any]) -> list[Any]:
        return list(r.get("deltas_ns", [r["delta_ns"]]))

    rows = [r for r in doc["rows"] if any(d is not None for d in deltas(r))]
    rows.sort(key=lambda r: -max(abs(d) for d in deltas(r) if d is not None))
    shown = rows if top <= 0 else rows[:top]
    missing = [r["name"] for r in doc["rows"] if any(d is None for d in deltas(r))]
    lower = [x.lower() for x in names]
    delta_heads = ["delta_ns"] if n == 2 else [f"{x}-a_ns" for x in lower[1:]]
    out = [f"{x}: {_safe(d['path'])}: {_config_line(d['config'])}" for x, d in zip(names, described)]
    out += [_title("summary"), _table(("key", *names, *(f"{x}/A" for x in names[1:])), summary),
            _title(f"largest per-iteration time changes by {doc['aligned_by']} "
                   f"({len(shown)} of {len(rows)})"),
            _table((doc["aligned_by"], *(f"{x}_ns" for x in lower), *delta_heads),
                   ((r["name"], *r.get("ns", [r["a_ns"], r["b_ns"]]), *deltas(r)) for r in shown))]
    if missing:
        out.append(f"\nin only {'one' if n == 2 else 'some'} of them: {', '.join(map(_safe, missing))}")
    return "\n".join(out)


def table_export(doc: dict[str, Any]) -> str:
    return f"wrote {_safe(doc['path'])} ({doc['format'].replace('_', ' ')} of {_safe(doc['source'])})"


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _emit(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if getattr(args, "format", "table") == "json":
        import json

        # json.dumps escapes every control character (and all non-ASCII): nothing to make safe
        text = json.dumps(doc, sort_keys=True, indent=2, default=_json_default, allow_nan=False)
    elif args.command == "compare":
        text = _safe(table_compare(doc, args.top), keep="\n")
    else:
        text = _safe(args.table(doc), keep="\n")  # the tables escape cells; this is the net under them
    _write_stdout(text + "\n")


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)

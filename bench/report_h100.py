"""Render what the GPU benchmarks and tests measured (bench/results/h100/*) as one Markdown page.

    python -m bench.report_h100 > bench/results/h100/README.md

Every figure comes from those files, which the scripts in bench/gpu and the GPU tests wrote on the lent
H100. The page ends with the questions closed by diagnoses since retired: the pages in notes/.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.passes import folder as passes_folder

HERE = Path(__file__).parent / "results" / "h100"
NOTES = Path(__file__).resolve().parents[1] / "notes"


def result(name: str) -> Any:
    """A benchmark's JSON output in HERE, or None where that benchmark has not been run."""
    path = HERE / name
    return json.loads(path.read_text()) if path.exists() else None


def main() -> int:
    probe = json.loads((HERE / "probe.json").read_text())
    speed = json.loads((HERE / "bench_speed.json").read_text())
    paging = json.loads((HERE / "bench_paging.json").read_text())
    grads = [json.loads(line) for line in (HERE / "gpu_gradients.jsonl").read_text().splitlines() if line]
    out = ["# Measured on the lent H100", "",
           f"Device: {probe['nvidia_smi']} (name, driver, memory, free, PCIe gen, width); "
           f"CuPy {probe['version_cupy']}, cuDNN frontend {probe['version_cudnn']}, PyTorch {probe['version_torch']}.",
           "", "Managed-memory prefetch probe (256 MiB): "
           f"to host {probe['managed_prefetch']['to_host']['GBps']:.1f} GB/s, "
           f"to device {probe['managed_prefetch']['to_device']['GBps']:.1f} GB/s.", "",
           "## No paging: engine (`device` policy) against PyTorch eager (`bench/gpu/bench_speed.py`)", "",
           "| model | engine, cuDNN heuristics | PyTorch | ratio | engine, autotuned | PyTorch, cudnn.benchmark "
           "| ratio |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in speed:
        out.append(f"| {r['model']} b{r['batch']} | {r['engine_ms']:.1f} ms | {r['pytorch_ms']:.1f} ms | "
                   f"{r['ratio']:.2f}x | {r['engine_autotuned_ms']:.1f} ms | {r['pytorch_benchmark_ms']:.1f} ms | "
                   f"{r['ratio_autotuned']:.2f}x |")
    out += ["", "## Paging at 50% of the footprint (`bench/gpu/bench_paging.py`)", "",
            "| model | policy | measured | simulated (uncalibrated) |", "|---|---|---:|---:|"]
    for r in paging:
        out.append(f"| {r['model']} b{r['batch']} | {r['policy']} | {r['measured_ms']:.1f} ms | "
                   f"{r['simulated_ms']:.1f} ms |")
    out += ["", "## Whole-model gradients after one step, against PyTorch in float64 "
            "(`tests/gpu/test_engine_gpu.py`)", "",
            "| case | engine error | PyTorch error, same precision |", "|---|---:|---:|"]
    for g in grads:
        out.append(f"| {g['case']} | {g['engine_error']:.2e} | {g['pytorch_error']:.2e} |")
    out += collectors_section() + every_iteration_section() + cupti_vs_engine() + gc_pause() + closed_investigations()
    print("\n".join(out))
    return 0


def collectors_section() -> list[str]:
    """Overhead of the collectors as runs are recorded, and CUPTI's counts against the plan
    (bench_collectors.json, written by bench/gpu/bench_collectors.py)."""
    c = result("bench_collectors.json")
    if c is None:
        return []
    p = c["policies"]
    out = ["", "## Collectors: their overhead, and CUPTI against the plan (`bench/gpu/bench_collectors.py`)", "",
           f"VGG-19 b64, `uvm` and `autovm` at 50%, `device` with the whole footprint; {c['iterations']} timed "
           "iterations per run; three ways taking turns in one process, each the median over its runs of each "
           "run's median timed iteration. \"Counted after\" is how runs are recorded: every collector on, "
           "CUPTI's unified-memory counters off in the timed iterations and on in one iteration after them. "
           "\"Counted throughout\" keeps them on in every iteration. The last column is a counted-after run's "
           "counted iteration against its own timed median (median over the runs).", "",
           "| policy | runs | no collectors | counted after | overhead | counted throughout | overhead "
           "| counted iteration vs timed |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for policy in ("device", "uvm", "autovm"):
        if policy not in p:
            continue
        r, m = p[policy], p[policy]["median_ms"]
        out.append(f"| {policy} | {len(r['runs']['none'])} | {m['none']:.1f} ms | {m['counted after']:.1f} ms "
                   f"| {r['overhead']:+.1%} | {m['counted throughout']:.1f} ms "
                   f"| {r['overhead_counted_throughout']:+.1%} | {r['counting_cost_in_run']:+.1%} |")
    out += ["", "Runs without collectors vary from run to run by more than these overheads: "
            + "; ".join(f"{policy} " + ", ".join(f"{x['timed_ms']:.0f}" for x in p[policy]["runs"]["none"]) + " ms"
                        for policy in ("uvm", "autovm") if policy in p) + ".", "",
            "CUPTI in the counted iteration of each counted-after run, against the bytes the plan moved "
            "(the capacity emulation carries it out exactly):", "",
            "| policy | CUPTI to device | plan to device | share | CUPTI to host | plan to host | share "
            "| faulted pages | fault groups |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for policy in ("uvm", "autovm"):
        if policy not in p:
            continue
        r = p[policy]
        for run in r["runs"]["counted after"]:
            cu, sh = run["cupti"], run["shares"]
            out.append(f"| {policy} | {cu['bytes_htod'] / 2**30:.2f} GiB | {r['plan_htod_bytes'] / 2**30:.2f} GiB "
                       f"| {sh.get('htod_share', 0):.3f} | {cu['bytes_dtoh'] / 2**30:.2f} GiB "
                       f"| {r['plan_dtoh_bytes'] / 2**30:.2f} GiB | {sh.get('dtoh_share', 0):.3f} "
                       f"| {cu.get('faulted_pages', 0)} | {cu.get('fault_groups', 0)} |")
    gaps = p.get("uvm", {}).get("largest_gaps")
    if gaps:
        out += gaps_table(gaps, "the last counted iteration")
    for way, r in c.get("long", {}).items():
        out += ["", f"A {r['iterations']}-iteration VGG-19 `uvm` session with every collector on, counted {way[8:]}: "
                    f"{r['bytes'] / 1e6:.2f} MB."]
    return out


def gaps_table(gaps: list[dict], when: str) -> list[str]:
    """The ops where CUPTI saw the fewest bytes arrive under `uvm`, as bench_collectors.py lists them."""
    return ["", "Under `uvm`, the ops where CUPTI saw the fewest bytes arrive against what the plan faults in "
                f"or prefetches for them ({when}):", "",
            "| op | plan | CUPTI | fault groups |", "|---|---:|---:|---:|",
            *(f"| {g['op']} | {g['planned'] / 2**20:.0f} MiB | {g['cupti'] / 2**20:.0f} MiB | {g['fault_groups']} |"
              for g in gaps)]

def every_iteration_section() -> list[str]:
    """The collectors' benchmark from before runs counted unified memory apart from their timed
    iterations (bench_collectors_every_iteration.json)."""
    c = result("bench_collectors_every_iteration.json")
    if c is None:
        return []
    out = ["", "### Before: unified memory counted in every iteration", "",
           "An earlier version of `bench/gpu/bench_collectors.py`, before runs counted unified memory in "
           "iterations of their own. VGG-19 b64, `uvm` and `autovm` at 50%, `device` with the whole "
           "footprint; per iteration.", "",
           "| policy | without collectors | with | overhead | CUPTI to device | plan to device | CUPTI to host "
           "| plan to host | remote-mapped | faulted pages | fault groups |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for policy in ("device", "uvm", "autovm"):
        r = c[policy]
        out.append(f"| {policy} | {r['without_ms']:.1f} ms | {r['with_ms']:.1f} ms | {r['overhead']:+.1%} "
                   f"| {r['cupti_htod_bytes'] / 2**30:.2f} GiB | {r['plan_htod_bytes'] / 2**30:.2f} GiB "
                   f"| {r['cupti_dtoh_bytes'] / 2**30:.2f} GiB | {r['plan_dtoh_bytes'] / 2**30:.2f} GiB "
                   f"| {r.get('remote_map_bytes', 0) / 2**30:.2f} GiB "
                   f"| {r['faulted_pages']:.0f} | {r['fault_groups']:.0f} |")
    if "uvm_breakdown_ms" in c:
        b = c["uvm_breakdown_ms"]
        out += ["", "Where the overhead under `uvm` comes from: the same run with parts of the collectors on "
                    "(`RunSettings.collectors`, `vmexplorer run --collectors`), side by side in one process:", "",
                "| collectors | iteration | overhead |", "|---|---:|---:|"]
        out += [f"| {label} | {v:.1f} ms | {v / b['none'] - 1:+.1%} |" for label, v in b.items()]
    gaps = c.get("uvm", {}).get("largest_gaps")
    if gaps:
        out += gaps_table(gaps, "per iteration")
    out += ["", f"A 20-iteration VGG-19 `uvm` session with every collector on: "
                f"{c['long_session_bytes'] / 1e6:.1f} MB."]
    runs = c.get("uvm_breakdown_runs_ms", {})
    if runs.get("none"):
        out += ["", "Iterations under `uvm` vary from run to run by more than the effects above (the runs "
                    f"without collectors: {', '.join(f'{v:.0f} ms' for v in runs['none'])}); each row is the "
                    "median of runs that took turns with the others."]
    return out


def gc_pause() -> list[str]:
    """Python's garbage collector paused inside timed iterations, measured and ruled out (bench_gc.json)."""
    g = result("bench_gc.json")
    if g is None:
        return []
    return ["", "## Python's garbage collector paused inside iterations (measured, then dropped)", "",
            "Runs taking turns in one process, with and without the collector paused inside timed iterations "
            "(a setting that was removed after this measurement):", "",
            "| run | median | largest / smallest iteration |", "|---|---:|---:|",
            *(f"| {k} | {v['median_ms']:.1f} ms | {v['spread']:.2f} |" for k, v in g.items()),
            "", "Pausing it did not steady the iterations, so it is not what makes ResNet-50's host-bound "
                "iterations vary."]


def nvml_estimate(session) -> tuple[float, float] | None:
    """NVML's PCIe throughput integrated over each recorded iteration, in bytes each way (to the
    device, to the host), the mean over iterations; None without NVML samples. Crude: each sample is
    the rate over NVML's own 20 ms window, and each throughput query blocks for its window, so the
    sampler reads fewer windows than an iteration holds and the sum stretches those it read over all of
    it. It is a check on CUPTI that shares nothing with it, not a measurement of record."""
    c, tl = session.collected, session.timeline
    if c is None or not c.available("nvml") or len(c.nvml_t_ns) < 2:
        return None
    t = c.nvml_t_ns.astype(np.float64)
    its = tl.iteration_ns().astype(np.float64)
    starts = np.concatenate([[0.0], np.cumsum(its)[:-1]])
    ways = []
    for rate in (c.nvml_pcie_rx_bytes_per_s, c.nvml_pcie_tx_bytes_per_s):
        per = []
        for a, d in zip(starts, its):
            m = np.flatnonzero((t >= a) & (t < a + d))
            if len(m) > 1:
                per.append(float((rate[m[1:]] * np.diff(t[m]) / 1e9).sum()))
        ways.append(float(np.mean(per)) if per else 0.0)
    return ways[0], ways[1]


def cupti_vs_engine() -> list[str]:
    """CUPTI's bytes each way in every measured sample session against what the engine moved (the
    plan's transfers, which the capacity emulation carries out exactly) and against NVML's PCIe
    counters: how complete CUPTI's counts are."""
    from vmexplorer.session import load_session

    rows = ["", "## CUPTI's migration counts in the sample sessions", "",
            "Each sample was recorded by `vmexplorer run` in a process of its own. Per iteration (medians; "
            "CUPTI's figures from the iteration counted after the timed ones where the session has one). The "
            "last column is NVML's PCIe throughput integrated over each iteration (mean over iterations; "
            "crude: `nvml_estimate` in `bench/report_h100.py` says why), a check that shares nothing with CUPTI: "
            "where it finds about the engine's bytes each way and CUPTI finds fewer, CUPTI lost records of "
            "bytes that did move.", "",
            "| session | engine to host | CUPTI to host | engine to device | CUPTI to device | CUPTI's share, "
            "in / out | CUPTI fault groups | NVML PCIe to device / to host |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for path in sorted((HERE.parents[2] / "sample_sessions").glob("*.measured.vms")):
        session = load_session(path)
        if "H100" not in session.environment.get("gpu", ""):  # the H200's samples are in the folder too
            continue
        m = session.summary
        if not m.get("bytes_to_host"):
            continue
        gib = {k: float(m.get(k, 0)) / 2**30 for k in ("bytes_to_host", "measured_bytes_dtoh", "bytes_to_device",
                                                 "measured_bytes_htod")}
        nvml = nvml_estimate(session)
        rows.append(f"| {path.name} | {gib['bytes_to_host']:.2f} GiB | {gib['measured_bytes_dtoh']:.2f} GiB "
                    f"| {gib['bytes_to_device']:.2f} GiB | {gib['measured_bytes_htod']:.2f} GiB "
                    f"| {m.get('measured_htod_share', '-')} / {m.get('measured_dtoh_share', '-')} "
                    f"| {m.get('measured_fault_groups', '-')} "
                    f"| {'-' if nvml is None else f'{nvml[0] / 2**30:.2f} / {nvml[1] / 2**30:.2f} GiB'} |")
    return rows + share_over_passes() + passes_section()


def share_over_passes() -> list[str]:
    """CUPTI's share of the bytes to the device in every recording of each paging configuration
    (bench/results/h100/passes), not just the kept one: how often it comes within 10%."""
    from vmexplorer.session import load_session

    shares: dict[str, list[float]] = {}
    for folder in sorted(passes_folder(HERE / "passes").glob("pass*")):
        for path in sorted(folder.glob("*pct.measured.vms")):
            share = load_session(path).summary.get("measured_htod_share")
            if isinstance(share, float):
                shares.setdefault(path.name.removesuffix(".measured.vms"), []).append(share)
    if not shares:
        return []
    rows = ["", "CUPTI's share of the bytes to the device in every recording (`bench/results/h100/passes`):", "",
            "| configuration | recordings | lowest | median | highest | within 10% |", "|---|---:|---:|---:|---:|---:|"]
    for name, v in sorted(shares.items()):
        rows.append(f"| {name} | {len(v)} | {min(v):.3f} | {np.median(v):.3f} | {max(v):.3f} "
                    f"| {sum(x >= 0.9 for x in v)} of {len(v)} |")
    return rows


def passes_section() -> list[str]:
    """What the recording passes hold: every recording, reduced by bench/reduce_passes.py."""
    folders = sorted(p for p in passes_folder(HERE / "passes").glob("pass*") if p.is_dir())
    if not folders:
        return []
    return ["", "## The recording passes (`passes.tar`)", "",
            f"Every recording behind the samples: {len(folders)} passes of `bench/gpu/record_samples.py`, a folder "
            "each with its log (`record_samples.json`), kept as one archive (`python -m bench.passes`). "
            "`bench/pick_samples.py` copied each configuration's median "
            "recording, whole, into `sample_sessions/`. The passes are kept reduced to what is read from them "
            "(`python -m bench.reduce_passes`, run after `pick_samples.py`; run again it changes nothing): each "
            "session's graph, plan and timeline, on which `bench/validate_simulator.py` calibrates and simulates, "
            "and CUPTI's unified-memory counts merged to one row per kind and iteration, every total kept (the "
            "shares above). Their kernel records, memory copies and NVML samples are dropped, and each session's "
            "collector status says so."]


def closed_investigations() -> list[str]:
    """The questions the retired diagnostic scripts answered, each a page in notes/ (notes/README.md)."""
    pages = sorted(p for p in NOTES.glob("*.md") if p.name != "README.md")
    if not pages:
        return []
    titles = [(p, p.read_text().splitlines()[0].removeprefix("# ")) for p in pages]
    return ["", "## Closed investigations", "",
            "Diagnoses run on this H100 and since retired, each a page in `notes/` with its question, method, "
            "measurements and the commit that holds its script:", "",
            *(f"- [{title}](../../../notes/{p.name})" for p, title in titles)]


if __name__ == "__main__":
    sys.exit(main())

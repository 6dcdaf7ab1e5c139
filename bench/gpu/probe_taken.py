"""Probe: what a run takes beyond its pool, and how much of it stays after the run frees everything
(kernels loaded on first use) -- one configuration per process. Prints one JSON line."""
import json
import sys

import cupy as cp

from vmexplorer.engine.executor import RunSettings, execute
from vmexplorer.graph import build_graph
from vmexplorer.policies import compile_plan

model, batch, policy, pct, mech = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
g = build_graph(model, batch, 224)
plan = compile_plan(g, g.footprint * pct // 100, policy, mechanism=mech)
r = execute(g, plan, RunSettings(iterations=3, warmup=1, collect=False))
second = execute(g, plan, RunSettings(iterations=3, warmup=1, collect=False)).device_memory
m = r.device_memory
scratch = cp.get_default_memory_pool().total_bytes()
cp.get_default_memory_pool().free_all_blocks()
after = int(cp.cuda.runtime.memGetInfo()[0])
MiB = 2**20
print(json.dumps({
    "config": sys.argv[1:], "capacity_mib": plan.capacity / MiB, "pool_mib": m.pool_bytes / MiB,
    "taken_mib": m.taken_bytes / MiB, "second_taken_mib": second.taken_bytes / MiB,
    "second_free_before_drop_mib": (m.free_before_bytes - second.free_before_bytes) / MiB,
    "scratch_mib": m.scratch_bytes / MiB, "scratch_now_mib": scratch / MiB,
    "kept_after_free_mib": (m.free_before_bytes - after) / MiB, "context_mib": (m.context_bytes or 0) / MiB}))

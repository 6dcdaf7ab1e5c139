"""The executor's program: a plan turned into host-order steps on three streams, as data.

The executor is a loop over these steps; everything about ordering is decided here, with no CUDA, so
it is tested on a CPU. Each step runs on one stream, first waits for events recorded by earlier
steps, then records its own `done` event. Following DESIGN.md, an asynchronous memory call comes as
late in host order as it can (right before the op that waits for it): the call blocks the host for
about its transfer, and by then the GPU has every op up to that one queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..graph import Graph
from ..plan import Direction, Mode, Plan


class Stream(StrEnum):
    COMPUTE = "compute"
    TO_HOST = "to_host"
    TO_DEVICE = "to_device"


class StepKind(StrEnum):
    OP = "op"  # run graph op `index`
    COPY = "copy"  # cudaMemPrefetchAsync of memop `index` on its copy stream
    EVICT = "evict"  # a driver eviction (memop `index`) on the compute stream, before the next op
    FAULT = "fault"  # memop `index` happens inside the next op's kernels: nothing to issue, only recorded


Event = tuple[str, int]  # ("op", k) or ("memop", i): recorded when that step is done


@dataclass(frozen=True)
class Step:
    kind: StepKind
    index: int
    stream: Stream
    waits: tuple[Event, ...]

    @property
    def done(self) -> Event:
        return ("op" if self.kind is StepKind.OP else "memop", self.index)


def schedule(graph: Graph, plan: Plan) -> tuple[Step, ...]:
    """One iteration's steps in host order."""
    n = len(graph.ops)
    due: list[list[int]] = [[] for _ in range(n + 1)]
    for i, m in enumerate(plan.memops):
        due[m.complete_before].append(i)
    last_move: dict[int, Event] = {}  # the latest memory operation issued on each tensor
    steps: list[Step] = []
    evictions: list[list[int]] = [[] for _ in range(n + 1)]  # driver evictions made before each op
    for i, m in enumerate(plan.memops):
        if m.mode is Mode.SYNC:
            evictions[m.complete_before].append(i)
    for k in range(n + 1):
        ready: list[Event] = []
        # evictions first: a prefetch landing before op k must wait for the room they make, or the
        # device would briefly hold more than the emulated capacity
        for i in sorted(due[k], key=lambda i: (plan.memops[i].mode is not Mode.SYNC, plan.memops[i].issue_after, i)):
            m = plan.memops[i]
            after: list[Event] = [("op", m.issue_after)] if m.issue_after >= 0 else []
            if m.tensor in last_move:  # an offload and the prefetch of the same tensor never overlap
                after.append(last_move[m.tensor])
            if m.mode is Mode.ASYNC:
                stream = Stream.TO_HOST if m.direction is Direction.TO_HOST else Stream.TO_DEVICE
                if m.direction is Direction.TO_DEVICE:
                    after += [("memop", j) for j in evictions[m.issue_after + 1]]
                steps.append(Step(StepKind.COPY, i, stream, tuple(dict.fromkeys(after))))
                ready.append(("memop", i))
            elif m.mode is Mode.SYNC:
                steps.append(Step(StepKind.EVICT, i, Stream.COMPUTE, tuple(e for e in after if e[0] == "memop")))
            else:
                steps.append(Step(StepKind.FAULT, i, Stream.COMPUTE, ()))
            last_move[m.tensor] = ("memop", i)
        if k < n:
            steps.append(Step(StepKind.OP, k, Stream.COMPUTE, tuple(ready)))
    return tuple(steps)

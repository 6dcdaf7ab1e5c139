"""The guided lesson, as data and pure functions over the store: each step names the sample it opens,
the tab it is seen in, what it lights up, and its words, written from the figures the view it sets
shows (`ui.numbers`), so what a class reads is what it sees.

`open_step(state, n)` is the one action: it opens the step's sample (and makes the step's edit, or its
comparison), then sets the view. Everything else here reads the store and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..config import Config, Mechanism
from ..details import memop_what
from ..graph import Kind, Phase
from ..plan import PlanError
from ..records.breakdown import TimeSplit
from ..session import Session, timing_graph
from ..session.planned import plan_for
from ..session.samples import short_gpu
from ..simulator import simulate
from ..units import format_bytes, format_ns
from . import numbers
from .state import AppState


@dataclass(frozen=True)
class Step:
    """One step: the view it opens and its words."""

    title: str
    sample: str  # the sample session it opens
    words: Callable[[AppState], str]
    tab: str = "Session"  # where it is seen: the timeline's tab, the paging cliff's, or the comparison's
    lit: Callable[[AppState], int | None] | None = None  # the tensor it lights up in the timeline
    then: Callable[[AppState], bool] | None = None  # what it does after opening its sample (an edit, a comparison)


def open_step(state: AppState, n: int) -> bool:
    """Open step `n` (from 1; 0 ends the lesson): its sample, its edit or comparison, then its view."""
    if n == 0:
        state.step = 0
        return True
    if not 1 <= n <= len(LESSON):
        return state.fail(f"the lesson has steps 1 to {len(LESSON)}, not {n}")
    step = LESSON[n - 1]
    ok = state.open_sample(step.sample) and (step.then is None or step.then(state))
    state.show_step(n, step.tab, step.lit(state) if ok and step.lit is not None else None)
    return ok


def words(state: AppState) -> str:
    """What the shown step says, from the figures now shown; the problem when the step could not open."""
    if not 1 <= state.step <= len(LESSON):
        return ""
    step = LESSON[state.step - 1]
    return state.message or (step.words(state) if state.session is not None else "")


def _gpu(state: AppState) -> str:
    s = state.session
    assert s is not None
    return short_gpu(str(s.environment.get("gpu", "the GPU")))


def _fits(state: AppState) -> str:
    s, split = _shown(state)
    return (f"Everything fits: VGG-19 at batch 64 holds its {format_bytes(s.graph.footprint)} on the {_gpu(state)}. "
            f"An iteration takes {format_ns(split.iteration_ns)}, {100 * split.compute_ns / split.iteration_ns:.0f}% "
            "of it compute: the GPU never waits for memory.")


def _uvm(state: AppState) -> str:
    _, split = _shown(state)
    return (f"Half the memory, NVIDIA's demand paging (uvm): {format_ns(split.iteration_ns)} per iteration. "
            f"{format_ns(split.fault_wait_ns)} of it the kernels wait on demand faults and "
            f"{format_ns(split.transfer_wait_ns)} on the driver's evictions; compute is still "
            f"{format_ns(split.compute_ns)}." + _lit_words(state, _most_faulted(state), "the tensor faulted in most"))


def _autovm(state: AppState) -> str:
    s, split = _shown(state)
    by = _bytes_by(state)
    uvm = numbers.baseline(state, "uvm")
    than = "" if uvm is None else f", {numbers.times_than(split.iteration_ns, uvm.iteration_ns, 'uvm')}"
    return (f"Same capacity, AutoVM: it reads the training graph, offloads "
            f"{format_bytes(by.get(('planned offload', ''), 0))} of feature maps as the forward pass leaves them "
            f"and prefetches them before the backward pass needs them. {format_ns(split.iteration_ns)} per "
            f"iteration{than}. The driver still evicts {format_bytes(by.get(('driver eviction', ''), 0))} by itself, "
            f"and the update faults {format_bytes(by.get(('demand fault', 'update'), 0))} back in: the classifier's "
            "weights and their momenta, which AutoVM does not plan (it plans feature maps)."
            + _lit_words(state, _largest_moved(state), "its offload and its prefetch"))


def _early(state: AppState) -> str:
    _, split = _shown(state)
    was = state.unedited()
    if was is None:
        return "Drag a prefetch earlier: this session plans no prefetch that could be issued earlier."
    before = was.time_split()
    return (f"Drag a prefetch too early, here the one that costs most, as early as it may go: {state.status}. "
            f"The tensor comes back long before it is needed and takes the room others need, so the driver "
            f"evicts them and they fault back in: {format_ns(split.iteration_ns)} per iteration instead of "
            f"{format_ns(before.iteration_ns)}, both simulated with this session's cost model; "
            f"{format_ns(split.fault_wait_ns)} of it waiting on demand faults (from {format_ns(before.fault_wait_ns)})."
            + _lit_words(state, _dragged(state), "the prefetch dragged; its ghost marks where it was"))


def _cliff(state: AppState) -> str:
    lines = {line["policy"]: line for line in numbers.sweep(state)["lines"]}
    uvm, device = lines.get("uvm"), lines.get("device")
    if uvm is None or device is None or not uvm["iteration_ms"] or not device["iteration_ms"]:
        return "The paging cliff: iteration time against capacity, one line per policy."
    worst = uvm["iteration_ms"][0] / device["iteration_ms"][0]
    return (f"The paging cliff: at the least memory VGG-19 runs in ({uvm['capacity_pct'][0]:.0f}% of its "
            f"footprint), uvm is {worst:.1f}x slower than device. The dashed line is the bound: no schedule "
            "runs below it. The diamonds are runs measured on the GPU; tap one to open it.")


def _bound(state: AppState) -> str:
    s, split = _shown(state)
    b, uvm = numbers.bound(state), numbers.baseline(state, "uvm")
    rates = numbers.cost_of(state).for_mechanism(s.plan.mechanism)
    if b is None or uvm is None:
        return "Why this GPU cannot go faster: no bound could be worked out for this session."
    return (f"Why the {_gpu(state)} cannot go faster: at this capacity any schedule must move at least "
            f"{format_bytes(b.min_bytes_to_host)} out and back each iteration, and the driver migrates one way at a "
            f"time (at best {rates.fastest_evict_bytes_per_ns:.1f} GB/s out, {rates.prefetch_bytes_per_ns:.1f} GB/s "
            f"in, as this GPU's runs went): no schedule beats {format_ns(b.lower_bound_ns)} (the bound, drawn on the "
            f"bars), set by {b.set_by}. The searched schedule ({s.plan.policy}) takes {format_ns(split.iteration_ns)}: "
            f"{b.versus(split.iteration_ns).split(',')[0]} and "
            f"{numbers.times_than(split.iteration_ns, uvm.iteration_ns, 'uvm')} ({format_ns(uvm.iteration_ns)}).")


def _driver(state: AppState) -> str:
    s, split = _shown(state)
    through = state.comparison
    cost = numbers.cost_of(state)
    by_driver = numbers.bound_through(state, Mechanism.UVM)
    b = numbers.bound(state)
    if through is None or by_driver is None or b is None:
        return "What the driver costs: no measured run of this schedule through unified memory to set beside it."
    uvm_ns, rates = through.time_split().iteration_ns, cost.for_mechanism(Mechanism.SWAP)
    same = "the same schedule" if through.plan.moves == s.plan.moves else f"{s.plan.policy}'s schedule for each"
    faster = numbers.times_than(split.iteration_ns, uvm_ns, "through the driver")
    return (f"What the driver costs: {same}, both measured on the {_gpu(state)}, A as pinned copies, B through "
            f"unified memory (the bars above). Through the driver an iteration takes {format_ns(uvm_ns)}; as "
            f"copies {format_ns(split.iteration_ns)}, {faster}: copies move {rates.evict_bytes_per_ns:.1f} GB/s "
            f"out and {rates.prefetch_bytes_per_ns:.1f} GB/s in, "
            f"both ways at once, where the driver moves one way at a time. No schedule beats "
            f"{format_ns(by_driver.lower_bound_ns)} through the driver, or {format_ns(b.lower_bound_ns)} with copies.")


def _move_or_recompute(state: AppState) -> str:
    s, _ = _shown(state)
    weighed = _weighed(state)
    if weighed is None:
        return "Move or recompute? This model's forward pass writes no feature map to weigh."
    g, m = s.graph, numbers.move_or_recompute(state, weighed)
    t, op = g.tensors[weighed], g.ops[m.producer]
    reads = ", ".join(g.tensors[r].name for r in op.reads if g.tensors[r].kind is not Kind.WEIGHT) or "none"
    than = f"{m.move_ns / m.recompute_ns:.0f}x less than" if m.recompute_ns < m.move_ns else \
        f"{m.recompute_ns / max(m.move_ns, 1.0):.1f}x more than"
    moved = any(mv.tensor == weighed for mv in state.moves)
    return (f"Move or recompute? {t.name} ({format_bytes(t.nbytes)}), a feature map "
            f"{f'{s.plan.policy} moves' if moved else 'of this model'}, made by {op.name} ({op.kind}). "
            f"Moving it out and back takes {format_ns(m.out_ns)} + {format_ns(m.in_ns)} = "
            f"{format_ns(m.move_ns)} of copies at this GPU's rates ({m.out_bytes_per_ns:.1f} GB/s out, "
            f"{m.in_bytes_per_ns:.1f} GB/s in, through {s.plan.mechanism}); running {op.name} again takes "
            f"{format_ns(m.recompute_ns)} of compute, {than} moving it. Copies can run beside the compute, but a "
            f"recomputation takes the GPU's own time, and needs the tensors its op reads ({reads}) still on the "
            f"GPU." + _checkpoint_words(state) + _lit_words(state, weighed, "the feature map weighed" +
                                                            (", with its offload and prefetch" if moved else "")))


def _checkpoint_words(state: AppState) -> str:
    """What recomputing costs a whole iteration: checkpoint's bar beside the shown session's."""
    checkpoint = numbers.baseline(state, "checkpoint")
    if checkpoint is None:
        return ""
    split = checkpoint.split
    paged = split.fault_wait_ns + split.transfer_wait_ns
    return (f" checkpoint, which recomputes the feature maps of all but the last of its segments, spends "
            f"{format_ns(split.recompute_ns)} of its {format_ns(checkpoint.iteration_ns)} per iteration recomputing "
            f"(the hatched part of its bar)" + (f" and waits {format_ns(paged)} on paging the rest." if paged else "."))


def _weighed(state: AppState) -> int | None:
    """The feature map the move-or-recompute step weighs: the largest activation a forward op writes that
    the plan moves (the class sees its trip in the timeline), else the largest a forward op writes."""
    s = state.session
    assert s is not None
    g = s.graph
    made = [t for t, x in enumerate(g.tensors)
            if x.kind is Kind.ACTIVATION and not x.persistent and g.ops[x.producer].phase is Phase.FORWARD]
    moved = {mv.tensor for mv in state.moves} & set(made)
    return max(moved or made, key=lambda t: (g.tensors[t].nbytes, -t), default=None)


def _shown(state: AppState) -> tuple[Session, TimeSplit]:
    s = state.session
    assert s is not None
    return s, s.time_split()


def _bytes_by(state: AppState) -> dict[tuple[str, str], int]:
    """Bytes moved by kind of transfer (`details.memop_what`), in all and in the update phase alone."""
    s = state.session
    assert s is not None
    out: dict[tuple[str, str], int] = {}
    n = len(s.graph.ops)
    for m in s.plan.memops:
        what = memop_what(m, s.plan.mechanism)
        phase = s.graph.ops[min(m.complete_before, n - 1)].phase.value
        for key in ((what, ""), (what, phase)):
            out[key] = out.get(key, 0) + m.nbytes
    return out


def _most_faulted(state: AppState) -> int | None:
    """The tensor whose demand faults bring the most bytes in, over the session's plan."""
    s = state.session
    assert s is not None
    faulted: dict[int, int] = {}
    for m in s.plan.memops:
        if memop_what(m) == "demand fault":
            faulted[m.tensor] = faulted.get(m.tensor, 0) + m.nbytes
    return max(faulted, key=lambda t: (faulted[t], -t)) if faulted else None


def _largest_moved(state: AppState) -> int | None:
    """The largest tensor the plan offloads and prefetches."""
    s = state.session
    assert s is not None
    moved = {mv.tensor for mv in state.moves if mv.prefetch_after is not None}
    return max(moved, key=lambda t: (s.graph.tensors[t].nbytes, -t)) if moved else None


def _dragged(state: AppState) -> int | None:
    """The tensor whose round trip the edits moved (the first one, in the plan's order)."""
    before = {} if state.loaded is None else {mv.tensor: mv for mv in state.loaded.plan.moves}
    return next((mv.tensor for mv in state.moves if before.get(mv.tensor) != mv), None)


def _lit_words(state: AppState, lit: int | None, what: str) -> str:
    s = state.session
    if s is None or lit is None:
        return ""
    t = s.graph.tensors[lit]
    return f" Lit up in the timeline: {t.name} ({format_bytes(t.nbytes)}), {what}."


def drag_costliest_prefetch_early(state: AppState) -> bool:
    """Drag, as early as it may go, the prefetch whose earliness costs the iteration the most (each
    candidate planned and simulated with the session's cost model)."""
    s, cost = state.session, state.cost_model
    assert s is not None and cost is not None
    config: Config = replace(s.plan.config, policy="manual", options={})
    worst: tuple[int, int, int, int] | None = None  # (time, -position, the move's prefetch_after, earliest)
    for i, mv in enumerate(state.moves):
        if mv.prefetch_after is None:
            continue
        earliest = state.marker_range("prefetch", mv.tensor, mv.prefetch_after)[0]
        if earliest >= mv.prefetch_after:
            continue
        moves = [*state.moves[:i], replace(mv, prefetch_after=earliest), *state.moves[i + 1:]]
        try:
            plan = plan_for(config, cost, moves, graph=s.graph, recomputes=state.recomputes).plan
        except PlanError:
            continue
        took = int(simulate(s.graph, plan, cost, timing_graph(s.graph, plan, cost)).iteration_ns().max())
        if worst is None or (took, -i) > worst[:2]:
            worst = (took, -i, mv.prefetch_after, earliest)
    if worst is None:
        return state.fail("this session plans no prefetch that could be issued earlier")
    move = state.moves[-worst[1]]
    return state.drag("prefetch", move.tensor, worst[3], worst[2])


def compare_with_driver(state: AppState) -> bool:
    """Set the same schedule's measured run through unified memory beside the shown one."""
    s = state.session
    assert s is not None
    return state.compare_with_twin(s.plan.policy, Mechanism.UVM)


LESSON = (
    Step("1. Everything fits", "vgg19-b64-device.measured.vms", _fits),
    Step("2. Demand paging at 50%", "vgg19-b64-uvm-50pct.measured.vms", _uvm, lit=_most_faulted),
    Step("3. Feature maps moved ahead of time", "vgg19-b64-autovm-50pct.measured.vms", _autovm, lit=_largest_moved),
    Step("4. A prefetch too early", "vgg19-b64-autovm-50pct.measured.vms", _early, lit=_dragged,
         then=drag_costliest_prefetch_early),
    Step("5. The paging cliff", "vgg19-b64-uvm-50pct.measured.vms", _cliff, tab="Paging cliff"),
    Step("6. Why the GPU cannot go faster", "h200-vgg19-b64-tuned-50pct.measured.vms", _bound),
    Step("7. What the driver costs", "h200-vgg19-b64-belady-swap-50pct.measured.vms", _driver, tab="Compare",
         then=compare_with_driver),
    Step("8. Move or recompute?", "h200-vgg19-b64-autovm-50pct.measured.vms", _move_or_recompute, lit=_weighed),
)

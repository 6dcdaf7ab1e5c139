"""The sample sessions beside the package: what each is, in words a student reads, and where to find
the one measured beside another.

`sample_index()` reads every sample once per change of the folder and keeps what the app needs of each
without opening it again (`SampleInfo`); `read_sample` reads one session once per change of its file and
shares it (a Session is frozen) between every page of a process. The samples were recorded on the lent
GPUs by bench/gpu/record_samples.py and named by bench/pick_samples.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ..config import Mechanism, share_of_footprint
from ..graph import Graph
from ..policies import non_default_options
from ..simulator import CostModel
from ..simulator.named import samples_model
from .files import load_session
from .session import Session, SessionError

SAMPLES = Path(__file__).resolve().parents[2] / "sample_sessions"
DEFAULT_SAMPLE = "vgg19-b64-autovm-50pct.measured.vms"
MODEL_NAMES = {"alexnet": "AlexNet", "vgg11": "VGG-11", "vgg16": "VGG-16", "vgg19": "VGG-19",
               "resnet18": "ResNet-18", "resnet50": "ResNet-50", "resnet152": "ResNet-152"}
_POLICY_ORDER = ("device", "uvm", "autovm", "belady", "vdnn", "tuned", "manual")


@dataclass(frozen=True)
class SampleInfo:
    """What the app needs to know of a sample session without opening it again."""

    name: str  # its file's name
    key: tuple[str, int, int]  # the graph's model, batch and image size
    footprint: int
    capacity: int
    policy: str
    defaults: bool  # run with the policy's default options
    source: str  # "measured" or "simulated"
    iteration_ns: int
    gpu: str  # the GPU it was measured on, or "simulated"
    mechanism: Mechanism
    workspaces: bool = True  # its kernels' workspaces were graph tensors (schema 11 on)

    @property
    def label(self) -> str:
        """The sample in words, short enough for a sidebar's picker: "VGG-19 b64, autovm at 50% — H200" (a
        run measured on that GPU), "... — simulated" otherwise."""
        words = config_words(self.key[0], self.key[1], self.policy, self.mechanism, self.capacity, self.footprint)
        where = short_gpu(self.gpu) if self.source == "measured" else self.source
        return f"{words.replace(', batch ', ' b', 1)} — {where}"

    @property
    def group(self) -> str:
        """The picker's group: the GPU it ran on, and the model."""
        return f"{short_gpu(self.gpu)} · {model_name(self.key[0])}, batch {self.key[1]}"


def model_name(model: str) -> str:
    """A model as people write it: `vgg19` is VGG-19."""
    return MODEL_NAMES.get(model, model)


def short_gpu(gpu: str) -> str:
    """A GPU's name without its maker and memory size: "NVIDIA H100 80GB HBM3" is "H100"."""
    words = [w for w in gpu.split() if w.upper() not in ("NVIDIA", "TESLA")]
    return words[0] if words else gpu


def config_words(model: str, batch: int, policy: str, mechanism: Mechanism, capacity: int, footprint: int) -> str:
    """A configuration in words: "VGG-19, batch 64, belady through swap at 50%"."""
    if policy == "device":
        return f"{model_name(model)}, batch {batch}, device (everything fits)"
    through = "" if mechanism is Mechanism.UVM else f" through {mechanism.value}"
    return f"{model_name(model)}, batch {batch}, {policy}{through} at {share_of_footprint(capacity, footprint):.0f}%"


def samples() -> list[str]:
    """The sample sessions' file names, the default first."""
    names = sorted(p.name for p in SAMPLES.glob("*.vms") if p.is_file()) if SAMPLES.is_dir() else []
    return sorted(names, key=lambda n: n != DEFAULT_SAMPLE)


def sample_index() -> dict[str, SampleInfo]:
    """Every readable sample by name, read once per change of the folder (a page asks at every draw)."""
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(SAMPLES.glob("*.vms"))) if SAMPLES.is_dir() else ()
    return _index(stamp)


@functools.lru_cache(maxsize=2)
def _index(stamp: tuple[tuple[str, int], ...]) -> dict[str, SampleInfo]:
    out = {}
    for name, _ in stamp:
        try:
            s = load_session(SAMPLES / name)
        except SessionError:
            continue
        defaults = not non_default_options(s.plan.policy, s.plan.options)
        out[name] = SampleInfo(name, s.graph.key, s.graph.footprint, s.plan.capacity, s.plan.policy, defaults,
                               s.timeline.source, int(s.summary["iteration_ns"]), gpu_of(s) or "simulated",
                               s.plan.mechanism, s.graph.workspaces)
    return out


def sample_groups() -> dict[str, dict[str, str]]:
    """The samples for a picker: grouped by GPU and model (the default sample's group first), each by its
    label, in the order a lesson goes (device, then the policies, capacities rising, uvm before swap)."""
    index = sample_index()

    def order(info: SampleInfo) -> tuple[object, ...]:
        rank = _POLICY_ORDER.index(info.policy) if info.policy in _POLICY_ORDER else len(_POLICY_ORDER)
        return (info.capacity if info.policy != "device" else 0, rank, info.mechanism.value, info.name)

    default = index.get(DEFAULT_SAMPLE)
    groups: dict[str, list[SampleInfo]] = {default.group: []} if default else {}
    for info in sorted(index.values(), key=lambda i: (i.gpu == "simulated", i.gpu, i.key)):
        groups.setdefault(info.group, []).append(info)
    return {group: {info.label: info.name for info in sorted(infos, key=order)} for group, infos in groups.items()}


def read_sample(name: str) -> Session:
    """A sample session, read once per change of its file and shared by every page of the process."""
    st = (SAMPLES / name).stat()
    return _read_sample(name, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)  # the few a page opens by itself; a sample each holds tens of MB
def _read_sample(name: str, _mtime_ns: int, _size: int) -> Session:
    return load_session(SAMPLES / name)


def is_sample(name: str) -> bool:
    """Whether `name` is the file name of a sample (a name from a link is untrusted: no paths)."""
    return Path(name).name == name and name.endswith(".vms") and (SAMPLES / name).is_file()


def gpu_of(session: Session) -> str | None:
    """The GPU a measured session ran on, as the sample index names it; None for a simulated one."""
    return str(session.environment.get("gpu", "an unnamed GPU")) if session.timeline.source == "measured" else None


def measured_samples(graph: Graph, capacity: int, policy: str, gpu: str | None = None,
                     mechanism: Mechanism = Mechanism.UVM) -> list[str]:
    """The measured samples of `policy` through `mechanism` with its default options on this graph at
    this capacity (any capacity holding the footprint, for `device`), measured on `gpu` (None: any), by
    file name."""
    return [name for name, x in sample_index().items()
            if (x.source, x.key, x.policy, x.defaults) == ("measured", graph.key, policy, True)
            and (x.capacity >= graph.footprint if policy == "device" else x.capacity == capacity)
            and x.mechanism is (Mechanism.UVM if policy == "device" else mechanism) and gpu in (None, x.gpu)]


def gpu_cost_model(graph: Graph, gpu: str) -> CostModel | None:
    """The cost model the measured samples of `graph` (model, batch, image size) on `gpu` were calibrated
    with (one per GPU and graph: the recordings of its sample set pooled), or None where there are none.
    Samples whose convolutions ran outside the capacity (schema 10 and older) ran other kernels than a
    graph with workspaces runs (cuDNN chose within no limit): they do not judge it.

    Where the samples are not beside the package (an installed one), the models the package carries, written
    from them (`simulator.named`), give the same. A fresh run asks this once as it is saved, so the samples
    named for its model and batch are read first, `device` first (every sample of one GPU and graph carries
    the same model), before the whole index."""
    def judges(s: Session) -> bool:
        return (s.timeline.source, s.graph.key, gpu_of(s), s.graph.workspaces) == \
            ("measured", graph.key, gpu, graph.workspaces) and s.cost_model is not None

    named = sorted((n for n in samples() if f"{graph.model}-b{graph.batch}-" in n), key=lambda n: "-device." not in n)
    for name in named:
        try:
            s = read_sample(name)
        except SessionError:
            continue
        if judges(s):
            return s.cost_model
    for name, x in sorted(sample_index().items(), key=lambda item: item[1].policy != "device"):
        if name not in named and (x.source, x.key, x.gpu, x.workspaces) == ("measured", graph.key, gpu,
                                                                             graph.workspaces):
            try:
                cost = read_sample(name).cost_model
            except SessionError:
                continue
            if cost is not None:
                return cost
    return samples_model(graph, gpu)  # an install without the samples: the models written from them


def sweep_samples(shown: Session) -> list[SampleInfo]:
    """The measured samples a paging cliff draws beside `shown`: its model's, with the policies' default
    options, through uvm (the cliff's lines), and of its GPU when it was measured on one."""
    gpu = gpu_of(shown)
    return [x for x in sample_index().values()
            if (x.key, x.source, x.defaults, x.mechanism) == (shown.graph.key, "measured", True, Mechanism.UVM)
            and gpu in (None, x.gpu)]

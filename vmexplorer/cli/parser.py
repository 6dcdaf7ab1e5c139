"""The command line's arguments: one subcommand each, every error one line (UsageError)."""

from __future__ import annotations

from .. import __version__
from . import UsageError
from .commands import (
    _OPTION_DEST,
    cmd_calibrate,
    cmd_compare,
    cmd_export,
    cmd_graph,
    cmd_info,
    cmd_models,
    cmd_plan,
    cmd_run,
    cmd_simulate,
)
from .serve import cmd_serve
from .sweep import cmd_sweep, table_sweep
from .tables import (
    _flag,
    table_calibrate,
    table_compare,
    table_export,
    table_graph,
    table_info,
    table_models,
    table_plan,
    table_serve,
    table_simulate,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any, NoReturn


def _parser_class() -> type[argparse.ArgumentParser]:
    import argparse

    class _Parser(argparse.ArgumentParser):
        # argparse prints the usage block and exits; scripts want one parseable line, and main() decides
        def error(self, message: str) -> NoReturn:
            raise UsageError(f"{message} (see `{self.prog} --help`)")

    return _Parser


def build_parser() -> argparse.ArgumentParser:
    parser = _parser_class()(prog="vmexplorer", description="Profile, simulate and compare GPU unified-memory "
                     "paging policies for CNN training. docs/cli.md documents every command.")
    parser.add_argument("--version", action="version", version=f"vmexplorer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _model_commands(sub)
    _sweep_arguments(_command(sub, "sweep", cmd_sweep, table_sweep, "plan and simulate every point of models x "
                              "policies x mechanisms x capacities: one row each, as CSV or JSON", formats=False))
    _session_commands(sub)
    _run_arguments(_command(sub, "run", cmd_run, table_simulate, "run a plan on the GPU and save the measured session"))
    _serve_arguments(_command(sub, "serve", cmd_serve, table_serve,
                              "serve the web app at http://localhost:PORT/app, gzip-compressed (the app `panel serve "
                              "vmexplorer/app.py` serves); Ctrl-C stops it", formats=False))
    return parser


def _command(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, run: Callable[..., dict[str, Any]],
             table: Callable[..., str], text: str, formats: bool = True) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=text, description=text)
    p.set_defaults(run=run, table=table)
    if formats:
        p.add_argument("--format", choices=("table", "json"), default="table",
                       help="table for people (default), json for scripts")
    return p


def _model_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """models, graph, plan and simulate: a model's graph, and a policy's plan of it simulated."""
    from pathlib import Path

    from ..graph import DEFAULT_IMAGE_SIZE

    p = _command(sub, "models", cmd_models, table_models, "list the models with their sizes")
    p.add_argument("--batch", type=int, default=64, help="batch size for the sizes (default 64)")
    p.add_argument("--image-size", type=int, default=DEFAULT_IMAGE_SIZE, metavar="S")

    _graph_args(_command(sub, "graph", cmd_graph, table_graph, "ops and tensors of one training iteration"))
    p = _command(sub, "plan", cmd_plan, table_plan, "compile a policy's plan and simulate it")
    _plan_args(p)
    _cost_model_arg(p)
    p = _command(sub, "simulate", cmd_simulate, table_simulate, "simulate a plan and save it as a session file")
    _plan_args(p)
    _cost_model_arg(p)
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="session file to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="a note kept in the session (repeatable)")


def _session_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """info, calibrate, compare and export: what reads session files."""
    from pathlib import Path

    p = _command(sub, "info", cmd_info, table_info, "show a session file: config, environment, summary, notes")
    p.add_argument("file", type=Path, metavar="FILE")

    p = _command(sub, "calibrate", cmd_calibrate, table_calibrate,
                 "fit the simulator's cost model to a measured session and store it in the session")
    p.add_argument("file", type=Path, metavar="FILE", help="a measured session")
    p.add_argument("--device", type=Path, metavar="DEVICE",
                   help="the same model's measured device session (needed for a paging FILE)")
    p.add_argument("--out", type=Path, required=True, metavar="OUT", help="where to write FILE with its cost model")
    p.add_argument("--conv-plans", type=Path, metavar="PLANS",
                   help="cuDNN's plans timed on the same GPU (bench/gpu/conv_workspaces.py --plans): time each "
                        "convolution by the workspace it runs in")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists (OUT may be FILE itself)")

    p = _command(sub, "compare", cmd_compare, table_compare,
                 "compare session files side by side, each against the first (B/A, C/A, ...)")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE",
                   help="two session files or more (at most 26: A to Z); the first is the one the others are held "
                        "against")
    p.add_argument("--top", type=int, default=20, metavar="N",
                   help="table: show the N largest per-op changes (0: all; json has all)")
    p.add_argument("--html", type=Path, metavar="OUT",
                   help="also write a page (no server needed) of their summaries and their typical iterations one "
                        "above the other on one time scale")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")

    p = _command(sub, "export", cmd_export, table_export,
                 "export a session as a standalone HTML page or a Chrome trace", formats=False)
    p.add_argument("file", type=Path, metavar="FILE")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--html", type=Path, metavar="OUT", help="standalone HTML page (no server needed)")
    out.add_argument("--chrome-trace", type=Path, metavar="OUT", help="trace-event JSON for Perfetto")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")


def _run_arguments(p: argparse.ArgumentParser) -> None:
    from pathlib import Path

    _plan_args(p)
    models, default = _cost_model_texts()
    p.add_argument("--cost-model", metavar="NAME|FILE",
                   help=f"--policy tuned searches with {models} instead of the default ({default}); the "
                        "run itself is measured, and judged (its bound) by that model where it ran this graph on "
                        "this GPU, else by the samples' model of this GPU, else (device) by its own calibration")
    p.add_argument("--iterations", type=int, default=5, metavar="N", help="iterations timed (default 5)")
    p.add_argument("--warmup", type=int, default=1, metavar="N", help="iterations run first, not recorded")
    p.add_argument("--counted", type=int, default=1, metavar="N",
                   help="iterations run after the timed ones with CUPTI's unified-memory counters on, which "
                        "slow paging (default 1); 0 counts in every iteration, the timed ones included")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the synthetic batch")
    p.add_argument("--no-tf32", action="store_true", help="full fp32 convolutions and matmuls")
    p.add_argument("--autotune", action="store_true",
                   help="time every cuDNN plan once per shape and keep the fastest (like cudnn.benchmark)")
    p.add_argument("--dead-pages", choices=("keep", "discard"), default="keep",
                   help="managed memory: keep a dead tensor's pages on the device until a new tensor takes them "
                        "over (default; the device may then hold more than the capacity), or discard them where "
                        "the capacity has no room for them and populate new tensors in place (CUDA 13)")
    p.add_argument("--progress", action="store_true", help="print each iteration's loss on stderr")
    p.add_argument("--no-collectors", action="store_true", help="record without CUPTI and NVML")
    p.add_argument("--collectors", metavar="PARTS",
                   help="what to collect, comma-separated (default: all): kernels, migrations (bytes each way), "
                        "faults (GPU page-fault records), memcpy (explicit copies), nvml; counting unified "
                        "memory (migrations, faults) is what slows a paging run")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="session file to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="a note kept in the session (repeatable)")


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    from pathlib import Path

    from ..graph import DEFAULT_IMAGE_SIZE, MODELS

    p.add_argument("--model", required=True, metavar="M[:B],...",
                   help=f"models, comma-separated, each with its batch after a colon (vgg19:64) or --batch's: "
                        f"{', '.join(MODELS)}")
    p.add_argument("--batch", type=int, metavar="B", help="batch size of the models given without one")
    p.add_argument("--image-size", type=int, default=DEFAULT_IMAGE_SIZE, metavar="S",
                   help=f"square input images of S pixels (default {DEFAULT_IMAGE_SIZE})")
    p.add_argument("--policy", required=True, metavar="P,...",
                   help="policies, comma-separated, or all (every policy but manual); each with its default options")
    p.add_argument("--mechanism", default="uvm", metavar="M,...", help="uvm, swap or uvm,swap (default uvm)")
    p.add_argument("--capacity", required=True, metavar="C,...",
                   help="capacities, comma-separated, as plan takes them (50%%, 4GiB, 3e9) or ranges A..B:STEP "
                        "(45%%..100%%:5%%, 2GiB..4GiB:256MiB); those below a model's least capacity are rows with "
                        "a note")
    _cost_model_arg(p)
    p.add_argument("--format", dest="rows_format", choices=("csv", "json"), default="csv",
                   help="csv (default: a header, one row per point) or json (integer ns and bytes)")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the rows to FILE, whole once every point is "
                   "done (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--jobs", type=int, metavar="N", help="processes running points at once (default: the cores)")
    p.add_argument("--progress", action="store_true",
                   help="show the progress bar on stderr even where it is not a terminal")


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=5006, metavar="N", help="TCP port (default 5006; 0: any free one)")
    p.add_argument("--address", metavar="A",
                   help="address to listen on (default: every address of this machine, as `panel serve`)")
    p.add_argument("--allow-websocket-origin", action="append", metavar="HOST[:PORT]",
                   help="a host whose pages may connect (repeatable; default localhost:PORT): the name or "
                        "address people type to reach this server, e.g. 10.0.0.5:5006")
    p.add_argument("--show", action="store_true", help="open the app in a browser once it serves")
    p.add_argument("--num-procs", type=int, default=1, metavar="N",
                   help="server processes sharing the port (default 1; 0: one per CPU core; Linux only): a "
                        "class opening the page at once is served by every core, and GPU runs still go one "
                        "at a time")


def _graph_args(p: argparse.ArgumentParser) -> None:
    from pathlib import Path

    from ..graph import DEFAULT_IMAGE_SIZE, MODELS

    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", choices=list(MODELS), metavar="MODEL", help=f"one of: {', '.join(MODELS)}")
    which.add_argument("--model-file", type=Path, metavar="FILE",
                       help="or a CNN of your own from an ONNX file (needs `pip install 'vmexplorer[onnx]'`; "
                            "docs/cli.md lists the ONNX ops it takes); its sessions carry its graph, so they "
                            "open where the file is not")
    p.add_argument("--batch", type=int, required=True, help="batch size")
    p.add_argument("--image-size", type=int, metavar="S",
                   help=f"square input images of S pixels (default {DEFAULT_IMAGE_SIZE}; with --model-file, "
                        "the file's)")


def _plan_args(p: argparse.ArgumentParser) -> None:
    from pathlib import Path

    from ..config import Mechanism
    from ..plan.mechanisms import MECHANISMS
    from ..plan.moves import MAX_MOVES_FILE_BYTES
    from ..policies import POLICIES
    from ..units import format_bytes

    _graph_args(p)
    p.add_argument("--capacity", required=True, metavar="C",
                   help="emulated device memory: bytes, a size such as 4GiB, or a share such as 50%% "
                        "of the footprint")
    p.add_argument("--policy", required=True, choices=list(POLICIES), metavar="P",
                   help="; ".join(f"{n}: {s.summary}" for n, s in POLICIES.items()).replace("%", "%%"))
    movers = ", ".join(name for name, spec in POLICIES.items() if not spec.uvm_only)
    p.add_argument("--mechanism", choices=[m.value for m in MECHANISMS], default=Mechanism.UVM.value,
                   help="how the bytes move: " + "; ".join(f"{m.value} ({s.summary})" for m, s in MECHANISMS.items())
                        + f"; a mechanism other than uvm takes {movers} (default uvm)")
    takers = " or ".join(f"--policy {name}" for name, spec in POLICIES.items() if spec.takes_moves)
    p.add_argument("--moves", type=Path, metavar="FILE",
                   help='manual plan, JSON {"moves": [{"tensor", "offload_after", "prefetch_after"}], '
                        '"recomputes": [{"tensor", "before"}]} (recomputes optional, numbered in the graph '
                        "without re-runs, the moves in the one with them, as `vmexplorer plan --json` writes "
                        f"them; {takers}; at most {format_bytes(MAX_MOVES_FILE_BYTES)})")
    group = p.add_argument_group("policy options (each belongs to the policy named in its help)")
    seen: set[str] = set()
    for policy, spec in POLICIES.items():
        for name, opt in spec.options.items():
            if name in seen:  # shared by several policies: one flag, checked against --policy later
                continue
            seen.add(name)
            _option_flag(group, policy, name, opt)


def _option_flag(group: argparse._ArgumentGroup, policy: str, name: str, opt: Any) -> None:
    """A policy option's flag; a plugin's option whose flag is one of the command's own is left without one
    (its default holds), with a warning, as the command line must not fail for it."""
    import argparse

    from ..plugins import warn

    choices = f"one of {', '.join(map(str, opt.choices))}; " if opt.choices else ""
    text = f"[{policy}] {opt.help} ({choices}default {opt.default})".replace("%", "%%")
    try:
        if opt.type is bool:
            group.add_argument(_flag(name), dest=_OPTION_DEST + name, default=argparse.SUPPRESS,
                               action=argparse.BooleanOptionalAction, help=text)
        else:  # with choices, argparse's metavar is {needed,all}: the usage line lists them too
            group.add_argument(_flag(name), dest=_OPTION_DEST + name, default=argparse.SUPPRESS,
                               type=opt.type, choices=opt.choices or None,
                               metavar=None if opt.choices else opt.type.__name__.upper(), help=text)
    except (argparse.ArgumentError, TypeError, ValueError) as e:
        warn(f"the {policy} policy's option {name!r} has no flag: {e}")


def _cost_model_arg(p: argparse.ArgumentParser) -> None:
    models, default = _cost_model_texts()
    p.add_argument("--cost-model", metavar="NAME|FILE",
                   help=f"simulate with {models} instead of the default, the cost model of {default}; --policy "
                        "tuned searches with it too")


def _cost_model_texts() -> tuple[str, str]:
    from ..simulator.named import DEFAULT_GPU, GPUS

    names = " or ".join(GPUS)
    return (f"the calibrated cost model of a GPU the samples were recorded on ({names}: its samples' model of "
            "the graph where they ran it, else its rates) or of a measured session FILE (`calibrate` stores one; "
            "a file named like one of them is given as ./NAME)", DEFAULT_GPU.replace("%", "%%"))


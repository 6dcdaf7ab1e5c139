"""Stage 2's compilers: a policy turns a graph and a capacity into a plan."""

from .registry import POLICIES, OptionSpec, PolicySpec, compile_plan, validate_plan

__all__ = ["POLICIES", "OptionSpec", "PolicySpec", "compile_plan", "validate_plan"]

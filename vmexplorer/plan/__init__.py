"""Stage 2, the plan: what a policy decides, as data, and the replay that checks it.

`plan.py` is the data (memory operations and the moves they pair into), `residency.py` replays a plan
op by op to find where every tensor is, what the driver must evict on top, and whether it fits;
`stays.py` gives a swap plan's time of each tensor in the pool and the copies that move nothing;
`copies.py` the order a swap plan's copy streams take their copies in.
"""

from ..config import Mechanism
from .plan import Direction, MemOp, Mode, Move, Origin, Plan, PlanError

__all__ = ["Direction", "Mechanism", "MemOp", "Mode", "Move", "Origin", "Plan", "PlanError"]

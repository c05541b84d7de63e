"""What stepwise consistency computed before its chunks and its runtime chain, shared by the
stepwise tests (tests/test_recurrent_stepwise.py) and the sweep's (tests/test_recurrent_sweep.py):
a T=1 baseline plan loaded from the host and a fused launch of its own per step, each
path's state carried through numpy."""

import numpy as np

from farm.oracle.compare import error_metrics
from farm.recurrent.paths import BaselinePlan, fused_recurrent
from farm.recurrent.stepwise import StepMetrics


def host_stepped(device, schedule, q, v, rho, decay) -> list[dict]:
    """The StepMetrics (as dicts) of stepping both paths from the host one step at a time."""
    start = np.zeros((q.shape[0], q.shape[1], q.shape[3], v.shape[3]), np.float32) if rho is None else rho
    base_state, fused_state, steps = start, start, []
    with BaselinePlan.build(device, q[:, :, :1], v[:, :, :1], start, decay) as plan:
        for step in range(q.shape[2]):
            q_t, v_t = q[:, :, step : step + 1], v[:, :, step : step + 1]
            plan.load(q_t, v_t, base_state)
            plan.run()
            base_ctx, base_state = plan.outputs()
            ctx, fused_state = fused_recurrent(device, schedule, q_t, v_t, fused_state, decay)
            steps.append(StepMetrics(step, error_metrics(ctx, base_ctx), error_metrics(fused_state, base_state)))
    return [s.as_dict() for s in steps]

"""A plan's steps unrolled into one small Python function (shared by both executors)."""

from __future__ import annotations


def unroll(plan, step_functions):
    """``run(operands)`` calling ``step_functions[s]`` on each step's operands in turn.

    Intermediates are deleted after their last use; the function's source is kept as
    ``run.source`` for ``einc dump``.
    """
    n = plan.num_operands
    last_use = {}
    for s, step in enumerate(plan.steps):
        for v in step.operands:
            last_use[v] = s
    name = lambda v: f"ops[{v}]" if v < n else f"t{v}"  # noqa: E731
    lines = ["def run(ops):"]
    env = {}
    for s, (step, fn) in enumerate(zip(plan.steps, step_functions)):
        env[f"step{s}"] = fn
        lines.append(f"    t{step.result} = step{s}({', '.join(name(v) for v in step.operands)})")
        lines += [f"    del t{v}" for v in step.operands if v >= n and last_use[v] == s]
    lines.append(f"    return t{plan.steps[-1].result}")
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<einc plan {plan.equation}>", "exec"), env)
    env["run"].source = source
    return env["run"]

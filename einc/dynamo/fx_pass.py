"""The FX pass of the ``einc`` torch.compile backend: contractions -> ``einc::einsum``.

On a dynamo graph (each node's ``meta["example_value"]`` holds a fake tensor) it

1. finds contractions -- ``torch.einsum`` (string form), ``matmul`` / ``@``, ``mm``,
   ``bmm``, ``tensordot`` and bias-free ``linear`` -- of floating or complex tensors of
   one dtype, and writes each as integer indices (einc's graph stage resolves
   ellipses and broadcasting), reading through the permutations (``transpose``,
   ``permute``, ``t``, ``.T``, ``.mT``) between them and their operands or users;
2. absorbs multiplications and divisions by scalars (numbers or symbolic sizes) on
   a contraction's operands or on its result, where nothing else uses the scaled
   tensor;
3. fuses a contraction whose result has no other user into the contraction that
   uses it, as opt-einsum-fx does, keeping the fusion only if einc's plan of the
   fused equation needs no more flops than the two plans apart;
4. replaces a contraction (fused or not) with one ``einc::einsum`` node, passing its
   constant scalar factors as the op's ``scale`` where generated kernels run it (the last
   kernel's epilogue applies it, at no cost), else applying them to the smallest of its
   operands and its result; only where it pays:
   where einc's plan needs fewer flops than the original nodes as torch runs them
   (each in the order torch would use: its one pairwise product, or for an einsum of
   three or more operands the path ``torch.backends.opt_einsum`` picks, left to right
   when that is off).  Every other contraction is left exactly as it was, for the
   inner compiler (``policy="all"`` rewrites every one).

Why flops only: on a CPU einc runs each step on the same BLAS calls torch does, with
a few microseconds of Python around them, and its result is always contiguous, so a
contraction whose plan saves no arithmetic runs no faster as an einc call, and
inductor's own lowering of it is as fast or faster (bench/models.py).  The pass has
no model of which copies either side makes, so it claims none saved.

Sizes for the cost decisions are the example sizes (hints under dynamic shapes);
they only steer choices -- the emitted equations hold for every size the graph's
guards admit.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch
import torch.fx

from .. import custom_op  # noqa: F401  (registers torch.ops.einc.einsum)
from ..planner.equation import letter, parse, text_of
from ..planner.graph import ContractionGraph, build
from ..planner.options import Options
from ..planner.plan import build_plan
from .fx_patterns import accepts, equation_of, mutates, permutation, scalar_factor, shape, val

FEWER_FLOPS = "fewer_flops"     # rewrite where einc's plan needs fewer flops than the nodes as written
ALL = "all"                     # rewrite every contraction found
POLICIES = (FEWER_FLOPS, ALL)


@dataclass
class Contraction:
    """A contraction in the graph: ``operands`` (fx nodes) x ``terms`` -> ``output``."""

    out: torch.fx.Node                     # the node whose uses the einsum takes over
    operands: list
    terms: list
    output: tuple
    sizes: dict
    factors: list = field(default_factory=list)     # [(scalar or node, "mul" | "div")]
    sources: list = field(default_factory=list)     # names of the original nodes
    exclusive: list = field(default_factory=list)   # per operand: may it be fused into this one
    written: object = None      # torch's order for the node: None (one order), False (left to right), a path
    placed: list = field(default_factory=list)      # per operand: those of ``factors`` written on it
    inside: list = field(default_factory=list)      # those of ``factors`` on a fused producer's result
    apart: list = field(default_factory=list)       # names of contractions a factor kept from fusing with it


@dataclass(frozen=True)
class Rewrite:
    """One emitted ``einc::einsum``: what it replaced and why."""

    equation: str
    sources: tuple[str, ...]
    fused: int                 # contractions merged into it (1: none)
    flops: int                 # einc's plan of the emitted equation
    unfused_flops: int         # the original contractions in torch's order, summed
    scale_on: str              # "-", "operand k", "output", "epilogue" (the op's scale: in the kernel),
    #                            "nothing (they multiply to 1)", or where they stay as written
    #                            ("operand 1 (as written)", "operand 0 and output (as written)"),
    #                            or a chain's factors on an operand and its result's on it ("operand 0 and output")

    def __str__(self) -> str:
        return (f"{self.equation:<28} <- {' + '.join(self.sources)}  (fused {self.fused}, flops {self.flops:.4g} "
                f"vs {self.unfused_flops:.4g} unfused, scalars on {self.scale_on})")


@dataclass(frozen=True)
class Left:
    """A contraction (or a chain the pass could have fused) left as it was written, and why."""

    equation: str              # what einc would have emitted
    sources: tuple[str, ...]   # the original nodes, all still in the graph
    fused: int                 # how many contractions the candidate einsum covered
    flops: int                 # einc's plan of that einsum
    unfused_flops: int         # the original contractions in torch's order, summed
    reason: str

    def __str__(self) -> str:
        cost = (f"{self.flops:.4g} flops either way" if self.flops == self.unfused_flops else
                f"einc's plan {self.flops:.4g} flops vs {self.unfused_flops:.4g} as written")
        return f"{self.equation:<28} <- {' + '.join(self.sources)}  (left as written: {self.reason}, {cost})"


# ----------------------------------------------------------------------- building contractions

def _resolve(x, exclusive, stop):
    """Read through permutations and (where ``exclusive``) scalar factors above an operand,
    up to a node in ``stop`` (the result of a contraction found earlier, which owns the
    factors and permutations it absorbed).

    Returns ``(source node, perm, factors, exclusive)``: dim ``d`` of the operand is dim
    ``perm[d]`` of the source.
    """
    perm, factors = None, []
    while isinstance(x, torch.fx.Node):
        exclusive = exclusive and len(x.users) == 1
        if x in stop:
            break
        p = permutation(x)
        if p is not None:
            x, q = p
            perm = q if perm is None else tuple(q[d] for d in perm)
            continue
        s = scalar_factor(x) if exclusive else None
        if s is not None:
            x, f, kind = s
            factors.append((f, kind))
            continue
        break
    return x, perm, factors, exclusive


def contraction(node, stop=frozenset(), movable=True):
    """The :class:`Contraction` that ``node`` computes, or None; ``stop`` as in :func:`_resolve`.

    With ``movable`` False (the graph mutates tensors in place) it takes over no scalar
    factor and nothing after the node, so that the einsum reads its operands exactly where
    the original node did; it still reads through permutations (views of the same data).
    """
    found = equation_of(node)
    if found is None:
        return None
    text, args = found
    if not all(isinstance(a, torch.fx.Node) for a in args) or not accepts(node, args):
        return None
    try:
        g = build(parse(text), [shape(a) for a in args])
    except Exception:           # not a valid einsum for these shapes: leave the node alone
        return None
    operands, terms, factors, exclusive, placed = [], [], [], [], []
    for a, term in zip(args, g.inputs):
        src, perm, fs, excl = _resolve(a, movable and args.count(a) == 1, stop)
        if perm is not None:
            t = [None] * len(term)
            for d, i in enumerate(term):
                t[perm[d]] = i
            term = tuple(t)
        operands.append(src)
        terms.append(tuple(term))
        factors += fs
        placed.append(fs[::-1])     # (read from the contraction outwards: as written, innermost first)
        exclusive.append(excl)
    c = Contraction(node, operands, terms, g.output, dict(enumerate(g.sizes)), factors, [node.name], exclusive,
                    _torch_order(text, args), placed)
    if movable:
        _absorb_users(c)
    return c


def _absorb_users(c: Contraction):
    """Take over scalar factors and permutations applied to the result, if only they use it."""
    while len(c.out.users) == 1:
        (u,) = c.out.users
        s = scalar_factor(u)
        if s is not None and s[0] is c.out:
            c.factors.append(s[1:])
        else:
            p = permutation(u)
            if p is None or p[0] is not c.out:
                return
            c.output = tuple(c.output[d] for d in p[1])
        c.out = u


# ----------------------------------------------------------------------- costs and fusion

def _torch_order(text, args):
    """The order torch.einsum contracts ``args`` in (what inductor's lowering inherits):
    None for two operands or fewer (one order), False for left to right, else the path
    ``torch.backends.opt_einsum`` picks (as :func:`torch.functional.einsum` asks it)."""
    if len(args) < 3:
        return None
    import torch.backends.opt_einsum as torch_opt_einsum
    if not (torch_opt_einsum.enabled and torch_opt_einsum.is_available()):
        return False
    try:
        path = torch_opt_einsum.get_opt_einsum().contract_path(
            text, *[shape(a) for a in args], shapes=True, optimize=torch_opt_einsum.strategy)[0]
        return tuple(tuple(int(i) for i in step) for step in path)
    except Exception:       # torch would fail alike; cost it as einc plans it (so: not rewritten)
        return None


def _plan_flops(c: Contraction, options=None) -> int:
    ids = {i: k for k, i in enumerate(dict.fromkeys([i for t in c.terms for i in t] + list(c.output)))}
    g = ContractionGraph(tuple(tuple(ids[i] for i in t) for t in c.terms), tuple(ids[i] for i in c.output),
                         tuple(c.sizes[i] for i in ids), tuple(letter(k) for k in range(len(ids))))
    return build_plan(g, options=options).flops


def flops(c: Contraction) -> int:
    """einc's planned flops for ``c`` (example sizes)."""
    return _plan_flops(c)


def written_flops(c: Contraction) -> int:
    """The flops of a contraction found in the graph (not a fused one) as torch runs it,
    counted as einc counts its plans."""
    if c.written is None:
        return flops(c)
    return _plan_flops(c, Options.of(c.written))


def fuse(producer: Contraction, consumer: Contraction, p: int) -> Contraction:
    """``consumer`` with its operand ``p`` (the producer's result) replaced by the producer's operands."""
    fresh = max(list(consumer.sizes) + list(producer.sizes)) + 1
    rename = dict(zip(producer.output, consumer.terms[p]))
    sizes = dict(consumer.sizes)
    for i, s in producer.sizes.items():
        if i not in rename:
            rename[i] = fresh
            fresh += 1
        sizes[rename[i]] = s
    terms = [tuple(rename[i] for i in t) for t in producer.terms]
    return Contraction(consumer.out, consumer.operands[:p] + producer.operands + consumer.operands[p + 1:],
                       consumer.terms[:p] + terms + consumer.terms[p + 1:], consumer.output, sizes,
                       producer.factors + consumer.factors, producer.sources + consumer.sources,
                       consumer.exclusive[:p] + producer.exclusive + consumer.exclusive[p + 1:],
                       placed=consumer.placed[:p] + producer.placed + consumer.placed[p + 1:],
                       inside=consumer.inside + producer.inside + _on_result(producer))


def _on_result(c: Contraction) -> list:
    """``c``'s factors on its own result (not on an operand, nor inside a fused chain)."""
    other = [f for fs in c.placed for f in fs] + c.inside
    return [f for f in c.factors if not any(f is g for g in other)]


def _scales_inside(fused: Contraction) -> bool:
    """Whether a fused chain would hold a factor on an intermediate result (a producer's,
    fused now or before) while its factors may not be moved (float16, symbolic,
    overflowing): it guards what reads that result (``x @ ((A @ B) * 1e-2)``), so the two
    stay apart."""
    return bool(fused.inside) and not _on_an_operand(fused)


def fuse_all(found: list) -> list:
    """Fuse producers into consumers (graph order) where the planned flops do not grow.

    Returns ``[(contraction, unfused flops)]`` for the contractions that remain.
    """
    by_out = {}
    alive = []
    for c in found:
        cost = flops(c)
        changed = True
        while changed:
            changed = False
            for p, (src, excl) in enumerate(zip(c.operands, c.exclusive)):
                prod = by_out.get(src)
                if prod is None or not excl or c.operands.count(src) != 1:
                    continue
                fused = fuse(prod[0], c, p)
                fused_cost = flops(fused)
                if fused_cost <= cost + prod[1] and _scales_inside(fused):
                    c.apart += prod[0].sources
                    prod[0].apart += c.sources
                elif fused_cost <= cost + prod[1]:
                    del by_out[src]
                    alive.remove(prod)
                    c, cost = fused, fused_cost
                    changed = True
                    break
        entry = (c, cost)
        by_out[c.out] = entry
        alive.append(entry)
    return alive


# ----------------------------------------------------------------------- emitting

def _text(c: Contraction) -> str:
    ids = {i: k for k, i in enumerate(dict.fromkeys([i for t in c.terms for i in t] + list(c.output)))}
    return text_of([[ids[i] for i in t] for t in c.terms], [ids[i] for i in c.output])


def _numel(c: Contraction, term) -> int:
    return math.prod(c.sizes[i] for i in term)


def _folded(factors):
    """The product of ``factors`` as a float where they are all numbers, else None."""
    if not all(isinstance(f, (int, float)) and not isinstance(f, bool) for f, _ in factors):
        return None
    scale = 1.0
    for f, kind in factors:
        scale = scale * f if kind == "mul" else scale / f
    return float(scale)


HEADROOM = 2.0 ** 64     # operand magnitudes, large and small, a factor moved onto an operand keeps finite and normal


def _on_an_operand(c: Contraction, factors=None) -> bool:
    """Whether ``c``'s factors (or ``factors``) may be multiplied into one and scale any operand (else each
    stays where it was written, :func:`emit`): numbers whose
    product leaves operand values between 1/:data:`HEADROOM` and :data:`HEADROOM` finite
    and normal in the dtype -- from ~2e-19 to ~2e19 in float32, bfloat16 and float64;
    none in float16, whose range is 6e-5 to 65504 (``x @ (A @ B) * 1000`` made ``x * 1000``
    inf where the result is finite, ``* 1e-5`` flushed ``x`` to 0 where it is 6e-4).
    Symbolic factors may be 0 or inf only when run (``/ s``, a float argument), and
    numbers' product may overflow where each is finite (``* 1e200 * 1e200``): on an
    operand, inf times its zeros would be NaN."""
    scale = _folded(c.factors if factors is None else factors)
    example = val(c.operands[0])
    if scale is None or not math.isfinite(scale) or not isinstance(example, torch.Tensor):
        return False
    info = torch.finfo(example.dtype)
    return HEADROOM * info.tiny <= abs(scale) <= info.max / HEADROOM


# Ops that keep their input's values (read through to the tensor they read): views, copies,
# value-preserving casts (``view(dtype)``, which reinterprets the bits, is not one) and parts.
_SAME_VALUES = frozenset({"t", "transpose", "permute", "view", "reshape", "unsqueeze", "squeeze", "expand",
                          "contiguous", "flatten", "unflatten", "swapaxes", "movedim", "view_as", "reshape_as",
                          "expand_as", "detach", "clone", "to", "float", "double", "bfloat16", "type", "narrow",
                          "select", "split", "chunk", "unbind", "diagonal"})
_SAME_VALUES_FUNCTIONS = frozenset({torch.t, torch.transpose, torch.permute, torch.reshape, torch.unsqueeze,
                                    torch.squeeze, torch.flatten, torch.swapaxes, torch.movedim, torch.detach,
                                    torch.clone, torch.narrow, torch.select, torch.split, torch.chunk, torch.unbind,
                                    torch.diagonal, operator.getitem})
_SAME_VALUES_ATTRIBUTES = frozenset({"T", "mT"})
# aten ops dynamo may record for them (torch 2.14 and 2.15 record ``x.T`` as ``aten.numpy_T``)
_SAME_VALUES_ATEN = _SAME_VALUES | {"numpy_T", "mT", "slice", "alias", "_unsafe_view"}


def _aten_name(target) -> str | None:
    """``numpy_T`` for ``torch.ops.aten.numpy_T`` (or one of its overloads), else None."""
    parts = str(target).split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" and isinstance(
        target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) else None


def _an_input(node) -> bool:
    """Whether ``node`` is a graph input or parameter (``placeholder``/``get_attr``), or a
    view, copy or value-preserving cast of one: the operands whose magnitudes
    :data:`HEADROOM` assumes bounded.  A value computed in the graph (a product, an
    activation) is eager's, of any size.  (Past a graph break a value computed before it
    is an input of the next graph, and assumed bounded: docs/autograd-and-compile.md says so.)"""
    while isinstance(node, torch.fx.Node):
        if node.op in ("placeholder", "get_attr"):
            return True
        aten = _aten_name(node.target)
        same = (node.op == "call_method" and node.target in _SAME_VALUES) or \
            (node.op == "call_function" and (node.target in _SAME_VALUES_FUNCTIONS or aten in _SAME_VALUES_ATEN or (
                node.target is getattr and len(node.args) == 2 and node.args[1] in _SAME_VALUES_ATTRIBUTES)))
        bits = "view" in (node.target, aten) and any(isinstance(a, torch.dtype)
                                                     for a in (*node.args[1:], *node.kwargs.values()))
        if not same or bits or not node.args:
            return False
        node = node.args[0]
    return False


UNDONE = 16.0   # factors whose product is within this of 1 (either way) nearly undo each other


def _nearly_undone(whole, part) -> bool:
    """Whether the numbers ``whole`` multiply to a product within :data:`UNDONE` of 1 and
    nearer 1 than ``part``'s: they nearly undo each other (``1e18 * 1e-17``), and scaling
    the result alone leaves the chain as if none was written.  Merely nearer 1 is not
    enough: ``1e-11 * 1e15`` would leave the chain 1e11 larger than eager's, whose ``B``
    was scaled down first."""
    a, b = _folded(whole), _folded(part)
    if a is None or b is None or not all(math.isfinite(v) and v != 0 for v in (a, b)):
        return False
    return abs(math.log(abs(a))) <= min(math.log(UNDONE), abs(math.log(abs(b))))


def _apply(graph, x, factors, fold=True):
    """``x`` times the product of ``factors``; constants are folded into one (unless not
    ``fold``: each as written, in order), except that a lone constant keeps its own
    operation (so ``/ 8`` stays a division)."""
    if not fold:
        for f, kind in factors:
            x = graph.call_function(operator.mul if kind == "mul" else operator.truediv, (x, f))
        return x
    consts = [(f, kind) for f, kind in factors if not isinstance(f, torch.fx.Node)]
    for f, kind in factors:
        if isinstance(f, torch.fx.Node):
            x = graph.call_function(operator.mul if kind == "mul" else operator.truediv, (x, f))
    if len(consts) == 1:
        f, kind = consts[0]
        return graph.call_function(operator.mul if kind == "mul" else operator.truediv, (x, f))
    const = 1.0
    for f, kind in consts:
        const = const * f if kind == "mul" else const / f
    return graph.call_function(operator.mul, (x, const)) if const != 1.0 else x


def _epilogue_scale(c: Contraction):
    """The product of ``c``'s factors as one float where they are all numbers and generated
    kernels run ``c`` (then the op's ``scale`` goes into the last kernel's epilogue, which
    costs nothing); None otherwise (the factors stay ops in the graph, on the smallest
    tensor, where inductor may fuse them into their neighbours)."""
    from ..runtime import dispatch
    scale = _folded(c.factors) if c.factors else None
    if scale is None or not math.isfinite(scale):       # an overflowing product: applied as written
        return None
    if any(c.placed) or c.inside:       # a factor written on an operand or an intermediate goes onto an
        return None                     # operand (emit), not after the chain, which it scaled in eager
    example = val(c.operands[0])
    if not isinstance(example, torch.Tensor) or \
            dispatch.decide(example.device.type, [example.dtype])[0] != "triton":
        return None
    return scale


def emit(gm: torch.fx.GraphModule, c: Contraction, unfused: int, replaced: dict) -> Rewrite:
    """Replace ``c`` in the graph with one ``einc::einsum`` call.

    ``replaced`` maps the results of contractions emitted before to their new nodes (an
    operand may be one); this call adds its own.
    """
    graph = gm.graph
    text = _text(c)
    operands = [replaced.get(o, o) for o in c.operands]
    scale_on = "-"
    before = c.out.prev
    with graph.inserting_before(c.out):
        rest = []
        scale = _epilogue_scale(c)
        if scale is not None:       # the op's scale: a generated kernel's epilogue applies it
            new = graph.call_function(torch.ops.einc.einsum.default, (text, operands, "auto", "", "", scale))
            scale_on = "epilogue"
        elif c.factors and _folded(c.factors) == 1.0 and (_on_an_operand(c) or not any(c.placed)):
            # (in float16 a factor on an operand guards an intermediate even where a factor on
            # the result undoes it: (x @ ((A * 1e-3) @ B)) * 1000; it stays, below)
            scale_on = "nothing (they multiply to 1)"     # (x @ w) * 1000 / 1000: nothing to overflow
        elif c.factors:
            # a chain's factors written on its result stay there: on an operand they would
            # scale the chain's intermediates, which eager's did not (they may overflow:
            # (x @ (A @ B)) * 1e15 ran as ((x * 1e15) @ A) @ B, inf where eager is 4e36)
            kept = _on_result(c) if len(c.terms) > 2 else []
            factors = [f for f in c.factors if not any(f is g for g in kept)]
            if kept and factors and _on_an_operand(c) and _nearly_undone(c.factors, factors):
                # the result's factors undo most of the others': all scale the result, and the
                # chain runs as if unwritten ((x @ ((A @ B) * 1e18)) * 1e-17: x * 1e18 overflowed;
                # (x @ (A @ (B * 1e-18))) * 1e19 as x * 10 tipped an x @ A at 5.8e37 over); where
                # factors may not move (float16, symbolic), one on an operand stays, as written
                kept, factors = c.factors, []
            movable = _on_an_operand(c, factors)
            places, mine = [], []
            if factors:
                sizes = [_numel(c, t) for t in c.terms] + [_numel(c, c.output)]
                if c.inside or any(c.placed):   # a factor written before the result: scaling the result
                    sizes[-1] = math.inf        # would leave the chain unscaled where eager's was (it may overflow)
                for k, o in enumerate(c.operands):
                    if not _an_input(o):    # computed in the graph: no operand HEADROOM bounds, its values
                        sizes[k] = math.inf     # eager's, however large ((y @ B) * 1e15, y = x @ A ~ 4e36:
                                                # y * 1e15 was inf where eager gives 3.2e34)
                movable = movable and min(sizes) < math.inf     # (else each factor as written)
                target = min(range(len(sizes)), key=lambda k: (sizes[k], k)) if movable else len(operands)
                if target < len(operands):
                    operands[target] = _apply(graph, operands[target], factors)
                    places.append(f"operand {target}")
                else:
                    # the result is the smallest tensor; or the factors may not move onto an operand
                    # (float16; symbolic or overflowing ones): then each factor written on an operand
                    # stays there, as written (in float16 a scale such as x @ ((A * 1e-3) @ B) guards
                    # an intermediate against overflow), and the others scale the result
                    mine = [] if movable else [(k, fs) for k, fs in enumerate(c.placed) if fs]
                    for k, fs in mine:
                        operands[k] = _apply(graph, operands[k], fs, fold=False)
                        places.append(f"operand {k}")
                    rest = [f for f in factors if not any(f is g for _, fs in mine for g in fs)]
            rest = rest + kept
            scale_on = " and ".join(places + (["output"] if rest else [])) + (" (as written)" if mine else "")
        if scale is None:
            new = graph.call_function(torch.ops.einc.einsum.default, (text, operands, "auto", ""))
        if rest:
            new = _apply(graph, new, rest, fold=_on_an_operand(c, rest))
    new.meta["stack_trace"] = c.out.meta.get("stack_trace")
    _give_values(before, c.out)
    c.out.replace_all_uses_with(new)
    replaced[c.out] = new
    return Rewrite(text, tuple(c.sources), len(c.sources), flops(c), unfused, scale_on)


def _give_values(before, out):
    """Give the nodes :func:`emit` put between ``before`` and ``out`` the example values of what
    they stand for: ``out``'s for the einsum and its scaled result, an operand's for a scaled
    operand.  The patterns read a node's shape there: a contraction emitted later that reads
    this one is erased through them (a ``tensordot`` of it raised ZeroDivisionError; a
    ``matmul`` of it was left in the graph, which the eager inner compiler ran again)."""
    node = before.next
    while node is not out:
        v = val(out) if node.target is torch.ops.einc.einsum.default else val(node.args[0])
        if v is not None:
            node.meta["example_value"] = v
        node = node.next


def rewrite(gm: torch.fx.GraphModule, policy: str = FEWER_FLOPS, left: list | None = None) -> list:
    """Run the pass on ``gm`` in place; returns the list of :class:`Rewrite`.

    ``policy``: ``"fewer_flops"`` (default) emits an einsum only where einc's plan needs
    fewer flops than the original contractions as torch runs them; ``"all"`` emits one
    for every contraction found.  The contractions left as they were are appended to
    ``left`` (as :class:`Left`), when given.  With nothing rewritten ``gm`` is untouched.
    """
    if policy not in POLICIES:
        raise ValueError(f"einc pass: policy must be one of {POLICIES}, got {policy!r}")
    if any("autocast" in str(n.target) for n in gm.graph.nodes if n.op == "call_function"):
        return []           # leave autocast regions to torch's own casting rules
    # Fusing and absorbing move where an operand is read; with in-place writes or state
    # changes (grad mode on/off) in the graph, that could read a value after it changed or
    # compute it in another mode, so then each contraction is only replaced where it is.
    movable = not any(mutates(n) or (n.op == "call_function" and n.is_impure(impure_random=False))
                      for n in gm.graph.nodes)
    found, outs = [], set()
    for node in list(gm.graph.nodes):
        c = contraction(node, outs, movable)
        if c is not None:
            found.append(c)
            outs.add(c.out)
    alive = fuse_all(found) if movable else [(c, flops(c)) for c in found]
    written = {c.sources[0]: written_flops(c) for c in found}
    replaced: dict = {}
    rewrites = []
    for c, cost in alive:
        unfused = sum(written[s] for s in c.sources)
        if _view(c):            # torch's result is a view of the operand: writes through it must reach it
            if left is not None:
                left.append(Left(_text(c), tuple(c.sources), 1, cost, unfused, "a view of its operand"))
        elif policy == ALL or cost < unfused:
            rewrites.append(emit(gm, c, unfused, replaced))
        elif left is not None:
            why = "no flops saved" if cost == unfused else "einc's plan needs more flops"
            if c.apart:
                why += (f"; not fused with {', '.join(dict.fromkeys(c.apart))}: a factor on the result one reads "
                        "from the other may not move (float16, symbolic or overflowing)")
            left.append(Left(_text(c), tuple(c.sources), len(c.sources), cost, unfused, why))
    if rewrites:
        _erase_replaced(gm.graph)
        gm.graph.lint()
        gm.recompile()
    return rewrites


def _view(c: Contraction) -> bool:
    """Whether torch.einsum may return this contraction as a view of its one operand (it
    sums nothing: a permutation, a diagonal), which an einsum's fresh result is not."""
    return len(c.operands) == 1 and not c.factors and set(c.terms[0]) <= set(c.output)


def _erase_replaced(graph):
    """Erase the nodes the einsums replaced: unused contractions, permutations and scalar
    factors (all out of place).  Not FX's dead-code elimination, which would also drop
    an unused in-place call such as ``a.mul_(2)``."""
    for node in reversed(list(graph.nodes)):
        if not node.users and node.op in ("call_function", "call_method") and not mutates(node) and (
                equation_of(node) is not None or permutation(node) is not None
                or scalar_factor(node) is not None):
            graph.erase_node(node)


__all__ = ["rewrite", "Rewrite", "Left", "Contraction", "contraction", "fuse", "fuse_all", "flops", "written_flops",
           "emit", "mutates", "FEWER_FLOPS", "ALL", "POLICIES"]

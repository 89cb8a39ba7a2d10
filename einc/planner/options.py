"""A call's options -- ``optimize``, ``memory_limit``, ``select``, ``layout`` -- validated once.

One :class:`Options` gives everything the rest of einc needs from them: the plan
cache's key (an interned object: equal options are the same object, so the key hashes
it by identity, in C), the optimizer to run (:meth:`Options.resolve`), the two strings
the custom op carries (:func:`encode`, :meth:`Options.from_op`; and the layout), and the options of a
gradient's einsum (:meth:`Options.for_gradient`: an explicit path belongs to its own
equation); and einc's ``auto`` up to 16 operands (:func:`_auto`), whose long searches' paths
are remembered on disk (:func:`_remembered`).  Pure Python: opt_einsum, and cotengrust where
installed, are the only imports beyond the standard library (and einc's path cache, where a
remembered path is read or one is stored).
"""

from __future__ import annotations

import decimal
import fractions
import functools
import math
import numbers
import os
import sys
import threading
import time

import opt_einsum
import opt_einsum.path_random
from opt_einsum.paths import PathOptimizer

from .. import config
from ..config import LAYOUTS, SELECT
from ..errors import ArgumentError, PathError, UnknownOptimizerError
from .givenpath import as_path, explicit_path, plain, plain_path
from .pathcost import path_cost

try:    # the dp search's library, loaded with einc as torch loads opt_einsum with torch: a
    import cotengrust  # noqa: F401   first search of 6-16 operands pays no import
except ImportError:
    pass

AUTO = "auto"
COTENGRA = "cotengra"     # cotengra's hyper-optimizer plans (and slices): see einc.planner.slicing
LEFT_TO_RIGHT = "left-to-right"
NOT_A_PATH = "einsum(): an explicit path is a list of tuples of ints, got "

CONTIGUOUS, ANY = LAYOUTS       # the result's layout: a fresh standard-contiguous tensor, or any dense one

# (optimize, memory_limit, select, layout) as given -> Options; read directly by einc.einsum's hot path.
INTERNED: dict = {}
_MAX_INTERNED = 4096
_by_value: dict = {}
_lock = threading.Lock()
os.register_at_fork(after_in_child=_lock._at_fork_reinit)   # a fork while another thread holds it


class Options:
    """``optimize``: ``"auto"``, an opt_einsum strategy name, ``False`` (left to right),
    an explicit path (a tuple of tuples of ints) or a path function / ``PathOptimizer``;
    ``memory_limit``: None, a number of elements, or ``"max_input"``; ``select``: how each
    step's backend is chosen (None: ``EINC_SELECT``; see :mod:`einc.runtime.select`);
    ``layout``: the result's, ``"contiguous"`` (a fresh standard-contiguous tensor) or
    ``"any"`` (a fresh dense, non-overlapping tensor in the order the plan writes it), None
    for ``EINC_LAYOUT`` (read when the key is planned: :meth:`result_layout`)."""

    __slots__ = ("optimize", "memory_limit", "name", "select", "layout")

    def __init__(self, optimize, memory_limit, name, select=None, layout=None):
        self.optimize = optimize
        self.memory_limit = memory_limit
        self.name = name                # for the plan's printout
        self.select = select
        self.layout = layout

    @staticmethod
    def of(optimize=AUTO, memory_limit=None, select=None, layout=None) -> Options:
        """The validated, interned options for these arguments (cached per argument tuple).

        >>> Options.of("greedy") is Options.of("greedy")
        True
        """
        try:
            options = INTERNED[optimize, memory_limit, select, layout]
            if optimize.__class__ is not tuple or plain(optimize):      # (a bool or float path: see call_options)
                return options
        except (KeyError, TypeError):   # new, or unhashable (a list path)
            pass
        optimize_n, name = normalized_optimize(optimize)
        limit = memory_limit_of(memory_limit)
        if isinstance(select, str):
            select = select.lower()         # any case, as EINC_SELECT
        if select is not None and select not in SELECT:
            raise ArgumentError(f"einsum(): select must be one of {', '.join(SELECT)} (or None for EINC_SELECT), "
                                f"got {select!r}")
        layout_n = _normalize_layout(layout)
        with _lock:
            if len(_by_value) >= _MAX_INTERNED:     # bounded: forgetting costs plan-cache misses only
                _by_value.clear()
                INTERNED.clear()
                _by_value[(AUTO, None, None, None)] = DEFAULT
            try:
                hash(optimize_n)
                value = optimize_n
            except TypeError:       # an optimizer object without a hash (a @dataclass): by identity,
                value = ("object", id(optimize_n))       # alive as long as its Options here holds it
            options = _by_value.get((value, limit, select, layout_n))
            if options is None:
                options = _by_value[(value, limit, select, layout_n)] = Options(optimize_n, limit, name, select,
                                                                               layout_n)
            try:
                if len(INTERNED) >= _MAX_INTERNED:
                    INTERNED.clear()
                # True == 1 and False == 0 as keys: a valid optimize=True or memory_limit=1 is
                # not interned as given, so that optimize=1 or memory_limit=True never finds it
                if optimize.__class__ is not bool and not (memory_limit == 1 and memory_limit.__class__ is not bool):
                    INTERNED[optimize, memory_limit, select, layout] = options
            except TypeError:
                pass
        return options

    def result_layout(self) -> str:
        """``"contiguous"`` or ``"any"``: ``layout``, or ``EINC_LAYOUT`` where it is None."""
        return self.layout or config.layout()

    def resolve(self):
        """``(path_function or None, explicit path or None)``."""
        opt = self.optimize
        if opt == AUTO:
            return _auto, None
        if opt is False:
            return None, LEFT_TO_RIGHT
        if isinstance(opt, str):
            return opt_einsum.paths.get_path_fn(opt), None
        if isinstance(opt, tuple):
            return None, opt
        return opt, None

    def for_gradient(self) -> Options:
        """The options of a gradient's einsum: ``"auto"`` in place of an explicit path
        (the gradient's operands are others) and as :meth:`for_batch`."""
        if isinstance(self.optimize, tuple):
            return Options.of(AUTO, self.memory_limit, self.select, self.layout)
        return self.for_batch()

    def for_batch(self) -> Options:
        """The options of the call's equation with more indices (vmap's batched one):
        ``"auto"`` in place of a random optimizer instance (opt_einsum's ``RandomGreedy``),
        which answers for the one contraction it was first called with."""
        if isinstance(self.optimize, opt_einsum.path_random.RandomOptimizer):
            return Options.of(AUTO, self.memory_limit, self.select, self.layout)
        return self

    def to_op(self) -> tuple[str, str, str]:
        """The custom op's ``optimize``, ``memory_limit`` and ``layout`` strings (``select`` does
        not travel: under torch.compile it is ``EINC_SELECT``'s)."""
        return (*encode(self.optimize, self.memory_limit), self.layout or "")

    @staticmethod
    def from_op(optimize: str, memory_limit: str, layout: str = "") -> Options:
        """The options the op's strings stand for (cached), the eager call's: the op runs the
        plan of the layout the call asked for (``""``: ``EINC_LAYOUT``'s, read where it is
        planned, as eagerly) and makes its result contiguous, as the op's fake kernel states it
        before any plan exists (sizes may be symbolic): the values are the eager call's."""
        return _decoded(optimize, memory_limit, layout)

    def __repr__(self) -> str:
        return (f"Options(optimize={self.name!r}, memory_limit={self.memory_limit!r}, select={self.select!r}, "
                f"layout={self.layout!r})")


DEFAULT = Options(AUTO, None, AUTO)     # einsum's default, the same object for good
_by_value[(AUTO, None, None, None)] = DEFAULT


def _normalize_layout(layout):
    """``layout`` as given: None, or ``"contiguous"`` / ``"any"`` in any case."""
    if layout is None:
        return None
    if isinstance(layout, str) and layout.lower() in LAYOUTS:
        return layout.lower()
    raise ArgumentError(layout_message(layout))


def layout_message(layout) -> str:
    """The error for a bad ``layout=``."""
    return (f"einsum(): layout must be one of {', '.join(map(repr, LAYOUTS))} (or None for EINC_LAYOUT), got "
            f"{layout!r}: 'contiguous' returns a fresh standard-contiguous tensor, 'any' a fresh dense tensor in "
            "the order einc's plan writes it")


def normalized_optimize(optimize):
    """``(optimize as einc keeps it, its name)``; raises for one it does not take (no lock: dynamo
    traces it where :meth:`Options.of` has not interned the options yet)."""
    if (path := plain_path(optimize)) is not None:     # (a list path is not interned: read at each call)
        return path, "explicit"
    optimize = as_path(optimize)
    if optimize is True or optimize == AUTO:
        return AUTO, AUTO
    if optimize is False or optimize is None:
        return False, LEFT_TO_RIGHT
    if optimize == COTENGRA:
        return COTENGRA, COTENGRA
    if isinstance(optimize, str):
        try:
            opt_einsum.paths.get_path_fn(optimize)
        except KeyError:
            names = sorted(set(opt_einsum.paths._PATH_OPTIONS) | {AUTO})
            raise UnknownOptimizerError(f"einsum(): unknown optimize={optimize!r}; valid names are "
                            f"{', '.join(names)}, a PathOptimizer, or an explicit path") from None
        return optimize, optimize
    if isinstance(optimize, PathOptimizer) or callable(optimize):
        return optimize, type(optimize).__name__
    if isinstance(optimize, (list, tuple)):
        if (path := explicit_path(optimize)) is None:
            raise PathError(NOT_A_PATH + repr(optimize))
        return path, "explicit"
    raise PathError(f"einsum(): optimize must be a name, a PathOptimizer or a path, got {optimize!r}")


def callers_optimizer(optimize) -> bool:
    """Whether ``optimize`` is the caller's optimizer, which einc calls as opt_einsum calls
    one (the caller's characters, the true sizes, once): a ``PathOptimizer``, a function,
    or the name of a function a caller registered (``opt_einsum.paths.register_path_fn``).
    einc's and opt_einsum's own searches, by name, get int labels instead (their set order,
    which breaks ties, is then the same in every process)."""
    if isinstance(optimize, str):
        try:
            fn = opt_einsum.paths.get_path_fn(optimize)
        except KeyError:        # "auto" among einc's names is einc's own; "cotengra" is no function
            return False
        fn = getattr(fn, "func", fn)        # (a functools.partial: opt_einsum's "branch-2")
        return getattr(fn, "__module__", "").partition(".")[0] not in ("einc", "opt_einsum")
    return callable(optimize) and not isinstance(optimize, (tuple, bool))


def plain_limit(memory_limit):
    """``memory_limit`` as Python's value, as every door reads it (and its error spells it):
    numpy's scalars and arrays as their ``tolist()``, as the traced doors must read them
    (:func:`einc.traced_doors.numpy_read`), and a Decimal (in opt_einsum's type hints) or a
    Fraction as an int where it is whole, else a float (a torch.fx node takes neither);
    anything else as given."""
    if type(memory_limit).__module__ == "numpy" and hasattr(memory_limit, "tolist"):
        return memory_limit.tolist()
    if isinstance(memory_limit, decimal.Decimal) and not memory_limit.is_finite():
        return float(memory_limit)
    if isinstance(memory_limit, (decimal.Decimal, fractions.Fraction)):
        return int(memory_limit) if memory_limit == int(memory_limit) else float(memory_limit)
    return memory_limit


def memory_limit_of(memory_limit):
    """The limit a call's ``memory_limit`` gives (None, an int, or ``"max_input"``), or its
    :class:`~einc.errors.PathError`: the one reading of every door, eager or traced."""
    memory_limit = plain_limit(memory_limit)
    if memory_limit is None or memory_limit == "max_input":
        return memory_limit
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, numbers.Real):
        raise PathError(f"einsum(): memory_limit must be None, a number of elements or 'max_input', "
                        f"got {memory_limit!r}")
    if memory_limit == -1:              # opt_einsum's spelling of no limit
        return None
    if not memory_limit >= 1:           # (NaN too)
        raise PathError(f"einsum(): memory_limit={memory_limit!r} elements cannot hold any intermediate; "
                        "give at least 1 (or None, or -1, for no limit)")
    return None if math.isinf(memory_limit) else int(memory_limit)


DP_OPERANDS = 16        # dynamic programming's reach; beyond it, einc.planner.search


def _auto(inputs, output, size_dict, memory_limit=None, reports=None):
    """einc's default: paid once per key, so search harder than torch's per-call ``auto``.

    Exhaustive up to 5 operands (:func:`_optimal`), dynamic programming up to 16 (never costlier than
    opt_einsum's ``dp``), each kept only where it costs no more flops than opt_einsum's own
    ``auto``, the path torch.einsum runs (:func:`_cheapest`), from 6 operands remembered on
    disk where the search took long (:func:`_remembered`); then
    :func:`einc.planner.search.search`: the path remembered on
    disk, else a greedy path, then a search whose time is in proportion to the
    contraction's predicted time (cotengra's hyper-optimizer where it is installed).
    ``reports``, a list, receives the search's report from 6 operands (:mod:`einc.planner.searchreport`).
    """
    n = len(inputs)
    if n < REMEMBER_OPERANDS:
        return _exact(inputs, output, size_dict, memory_limit)
    if n <= DP_OPERANDS:
        found = _remembered(inputs, output, size_dict, memory_limit)
    else:
        from .searchkey import recall
        found, name, tag = recall(inputs, output, size_dict, memory_limit)
        if found is None:       # (the search's modules are imported only where its path is not on disk)
            from . import search
            found = search.searched(inputs, output, size_dict, memory_limit, name, tag)
    path, report = found
    if reports is not None:
        reports.append(report)
    return path


def _exact(inputs, output, size_dict, memory_limit):
    """The search of up to :data:`DP_OPERANDS` operands: exhaustive up to 5, dynamic
    programming from 6, each kept only where it costs no more than opt_einsum's ``auto``."""
    found = (_optimal if len(inputs) <= 5 else _dynamic_programming)(inputs, output, size_dict, memory_limit)
    return _cheapest(inputs, output, size_dict, found, opt_einsum.paths.auto(inputs, output, size_dict, memory_limit))


# The search of REMEMBER_OPERANDS to DP_OPERANDS operands keeps a path that took DP_STORE_SECONDS
# or longer (CPU time of the thread, which the machine's load does not inflate) in the path cache
# (einc.planner.pathcache), where a later process reads it back instead: many times what reading
# an entry costs a new process, its first import of the path cache included, as a quicker search's
# file would take a slot of the cache's bound that a long search's path may need; the dp on a
# dense network of 14-16 operands takes far longer.  A network not remembered costs a key and a look
# at one file's name, and no import.  Up to 5 operands the exhaustive search costs about what a
# read does, so small calls never look.  DP_VERSION names the search: a change to it (_exact,
# _optimal, _dynamic_programming, _cap, _cheapest, pathcost) takes a new name, and old entries
# are missed (tests/planner/test_dp_memory.py holds the name to the source).
REMEMBER_OPERANDS = 6
DP_STORE_SECONDS = 0.01
DP_VERSION = "einc-dp-1"


def _remembered(inputs, output, size_dict, memory_limit):
    """``(path, report)``: :func:`_exact`'s path, read from the path cache where an earlier search of the
    network stored it, else searched (and stored where the search took :data:`DP_STORE_SECONDS` or longer),
    and what ``explain`` says of it (:func:`einc.planner.searchreport.exact`).  The entry's name
    (:func:`dp_entry`) names each operand's and the output's indices in the order the search iterates them,
    and the sizes in theirs (the searches break ties in that order), the memory limit, and :func:`dp_version`;
    the path cache is imported only where an entry of that name is there, or a path is stored."""
    from .searchreport import exact
    start, tag = time.thread_time(), dp_version()
    name, there = dp_entry(inputs, output, size_dict, memory_limit, tag)
    if there:
        from . import pathcache
        hit = pathcache.load(name, tag, len(inputs))
        if hit is not None:
            return list(hit[0]), exact(memory_limit, time.thread_time() - start, hit[1])
    start = time.thread_time()
    path = _exact(inputs, output, size_dict, memory_limit)
    seconds = time.thread_time() - start
    if seconds >= DP_STORE_SECONDS:
        from . import pathcache
        pathcache.store(name, tag, path, {"seconds": seconds})
    return path, exact(memory_limit, seconds, stored=seconds >= DP_STORE_SECONDS)


def dp_entry(inputs, output, size_dict, memory_limit, tag: str) -> tuple[str, bool]:
    """``(name, there)``: the name of the network's entry in the path cache (a SHA-256, as
    :func:`einc.planner.pathcache.key` names the longer search's), and whether a file of that
    name is in its folder (``<cache folder>/paths``: one look at the name, no link followed,
    nothing read; :func:`einc.planner.pathcache.load` checks the folders and the entry)."""
    import hashlib  # (the standard library's, loaded with torch)
    import json
    sizes = [(i, int(s)) for i, s in size_dict.items()]     # (plan_for takes numpy's integers too)
    text = json.dumps([tag, [list(t) for t in inputs], list(output), sizes, memory_limit], separators=(",", ":"))
    name = hashlib.sha256(text.encode()).hexdigest()
    try:
        there = os.path.lexists(os.path.join(config.cache_dir(), "paths", name + ".json"))
    except Exception:       # (ConfigError: a bad EINC_CACHE_DIR, which the path cache reports on a store)
        there = False
    return name, there


def dp_version() -> str:
    """The name of the search of up to :data:`DP_OPERANDS` operands, part of its remembered
    paths' keys: :data:`DP_VERSION`, its figures, opt_einsum's version and cotengrust's
    extension (by its size: cotengrust names no version of its own; "none" where it cannot
    be imported, the dp then opt_einsum's)."""
    rust = "none" if sys.modules.get("cotengrust") is None else \
        _extension(getattr(sys.modules.get("cotengrust.cotengrust"), "__file__", None))
    return ":".join((DP_VERSION, str(CAP_TRIALS), f"opt_einsum-{opt_einsum.__version__}", rust))


@functools.lru_cache(maxsize=4)
def _extension(file) -> str:
    """cotengrust's extension module, by its size (looked at once a process)."""
    try:
        return f"cotengrust-{os.stat(file).st_size}"
    except (OSError, TypeError, ValueError):
        return "cotengrust"


def _cheapest(inputs, output, size_dict, *paths):
    """The first of ``paths`` of least flops as einc's steps count them (opt_einsum's count,
    :func:`~einc.planner.pathcost.path_cost`).  Each search minimizes a count of its own
    (``optimal`` counts a pair's product once where it sums an index only one of the two
    carries, cotengrust's dp never multiplies two tensors that share no index), so another's
    path can cost less in this one."""
    paths = [[tuple(c) for c in p] for p in paths]
    costs = [path_cost(inputs, output, size_dict, p)[0] for p in paths]
    return paths[costs.index(min(costs))]


def _shared(inputs, output) -> bool:
    """Whether an index is on three or more operands (the output counted as one)."""
    count = dict.fromkeys(output, 1)
    for term in inputs:
        for i in term:
            count[i] = count.get(i, 0) + 1
    return max(count.values(), default=0) > 2


def _optimal(inputs, output, size_dict, memory_limit):
    """opt_einsum's exhaustive ``optimal`` search, made exhaustive where an index is on three
    or more operands.  ``optimal`` caches a pair's contraction under the pair's two index
    sets, but what the pair keeps depends on the operands still left: where two different
    tensors carry the same indices (``bgk,bkd,bk->bgd``: ``bk`` and a ``bk`` made from two
    others) the cache answers for the wrong one, and the search returns a costlier path
    than its own greedy one (opt_einsum issues 167 and 254).  One index of size 1 per
    operand, kept to the output, makes every tensor's index set name the operands it was
    made from, so each cached answer is the right one; sizes and flop counts are the same
    (a size-1 index multiplies nothing and is never summed).  Where every index is on at
    most two operands (the output counted as one), no two tensors with the same set can
    disagree on what a pair keeps, and the search runs as it is.  Labels here are einc's
    ints (0 up), the added ones negative."""
    if not _shared(inputs, output):
        return opt_einsum.paths.optimal(inputs, output, size_dict, memory_limit)
    tags = [-1 - k for k in range(len(inputs))]
    tagged = [set(term) | {tag} for term, tag in zip(inputs, tags)]
    sizes = {**size_dict, **dict.fromkeys(tags, 1)}
    return opt_einsum.paths.optimal(tagged, set(output) | set(tags), sizes, memory_limit)


def _dynamic_programming(inputs, output, size_dict, memory_limit):
    """A path of least flops among those without outer products: opt_einsum's ``dp``
    search, run by cotengrust's implementation of it where installed (in Rust: the same
    optimum, found faster, and the search is most of a 10-operand einsum's first call)
    and no memory limit applies (cotengrust's takes none); else opt_einsum's.

    cotengrust first simplifies the network (sums an index only one tensor carries,
    multiplies tensors with the same indices), which where an index is on three or more
    tensors can leave its dp a path far costlier than a greedy one (an example in
    bench/measured/paths-small-2026-12-06.md); so the best of the
    random greedy paths that start its sieve, and of the same trials on the network as it is,
    is kept where it costs fewer flops (asked only where an index is on three or more
    operands: elsewhere the simplifications leave the dp its optimum)."""
    if memory_limit is None:
        try:
            import cotengrust
        except ImportError:
            cotengrust = None
        if cotengrust is not None:
            label = {i: opt_einsum.get_symbol(k) for k, i in enumerate(size_dict)}   # it takes 1-character labels
            network = ([[label[i] for i in term] for term in inputs], [label[i] for i in output],
                       {label[i]: float(s) for i, s in size_dict.items()})
            greedy, log10_flops = cotengrust.optimize_random_greedy_track_flops(*network, ntrials=CAP_TRIALS, seed=0)
            found = [tuple(c) for c in cotengrust.optimize_optimal(*network, minimize="flops",
                                                                   cost_cap=_cap(log10_flops))]
            if not _shared(inputs, output):
                return found
            # the same greedy trials on the network as it is, where the simplifications are the trouble
            plain, _ = cotengrust.optimize_random_greedy_track_flops(*network, ntrials=CAP_TRIALS, seed=0,
                                                                     simplify=False)
            return _cheapest(inputs, output, size_dict, found, *(p for p in (greedy, plain) if p))
    return opt_einsum.paths.dynamic_programming(inputs, output, size_dict, memory_limit)


CAP_TRIALS = 8      # seeded random greedy trials whose best cost starts the dp's sieve


def _cap(log10_flops):
    """Where cotengrust's ``dp`` starts its sieve, from ``log10_flops`` (its own measure) of
    the best of :data:`CAP_TRIALS` seeded random greedy paths: their natural log, or None
    (its default, 2 flops).  The sieve admits only partial contractions costing up to the cap,
    and doubles the cap and searches again from the start until a whole path fits: from
    its default, once per doubling up to the optimum.  No path of the network costs less
    than the optimum, so from a path's cost one pass finds it -- the same least cost, ties
    broken in the order that pass meets them.  A cap below the optimum (a greedy path with
    an outer product) costs passes, never the optimum; one far above it, one wide pass,
    which a random greedy path, closer to the optimum than plain greedy's, makes rare."""
    cap = log10_flops * math.log(10)
    # (f32 sums in both searches: a hair of slack, so that the optimum at the cap is not sieved out)
    return cap * (1 + 1e-5) + 1e-4 if math.isfinite(cap) and cap > 0 else None


# ----------------------------------------------------------------------- torch's global settings

# The value of einc's ``optimize`` keyword when it is not passed: equal to ``"auto"`` but a
# distinct object (a literal ``"auto"`` is interned, this one is built at run time), so
# that ``optimize is DEFAULT_OPTIMIZE`` tells "not passed" from an explicit ``"auto"``.
DEFAULT_OPTIMIZE = "".join(["au", "to"])

TORCH_STRATEGIES = ("auto", "greedy", "optimal")


def torch_optimize(enabled, strategy):
    """The ``optimize`` einc's default stands for under torch's settings
    ``torch.backends.opt_einsum.enabled`` and ``.strategy``, read as torch.einsum reads them.

    ``enabled`` false: left to right, as torch.einsum contracts then.  A strategy other than
    ``"auto"`` (torch's default, so an explicit ``"auto"`` cannot be told from the default):
    that opt_einsum strategy -- torch checks for ``greedy`` and ``optimal`` in ``flags()``,
    but an assigned attribute reaches opt_einsum as it is, so any opt_einsum name runs, in
    torch.einsum and here.  Otherwise einc's own default, ``"auto"`` (a harder search than
    opt_einsum's ``auto``, paid once per key).

    >>> torch_optimize(True, "auto"), torch_optimize(False, "auto"), torch_optimize(True, "greedy")
    ('auto', False, 'greedy')
    """
    if not enabled:
        return False
    if strategy is None or strategy == AUTO:
        return AUTO
    try:
        opt_einsum.paths.get_path_fn(strategy)
    except (KeyError, AttributeError):
        raise PathError(f"torch.backends.opt_einsum.strategy is {strategy!r}, which is not an opt_einsum "
                        f"strategy (torch accepts {', '.join(TORCH_STRATEGIES)})") from None
    return strategy


# ----------------------------------------------------------------------- the op's strings

def encode(optimize, memory_limit) -> tuple[str, str]:
    """``optimize`` and ``memory_limit`` as the custom op's strings.  Plain code that dynamo
    traces under torch.compile; validation happens when the op decodes them, so each value
    reads back as itself: a name that reads as something else is marked ``name:``, a string
    limit ``str:``, and a list that is no path carries its repr to the eager call's error."""
    optimize = as_path(optimize)
    if isinstance(optimize, str):
        text = "name:" + optimize if optimize == "false" or optimize.startswith(("name:", "path")) else optimize
    elif optimize is True:
        text = AUTO
    elif optimize is False or optimize is None:
        text = "false"
    elif isinstance(optimize, (list, tuple)):
        path = explicit_path(optimize)
        text = "path!" + repr(optimize) if path is None else \
            "path:" + ";".join([",".join([str(i) for i in pair]) for pair in path])
    else:
        raise PathError("einsum(): under torch.compile, optimize must be a strategy name, a bool or an explicit "
                        f"path; a {type(optimize).__name__} object cannot be passed to the compiled op")
    if memory_limit is None:
        limit = ""
    elif isinstance(memory_limit, str):
        limit = "str:" + memory_limit
    elif isinstance(memory_limit, float) and memory_limit == math.inf:
        limit = ""                      # no limit, as in eager calls
    elif isinstance(memory_limit, int) and not isinstance(memory_limit, bool):
        limit = str(memory_limit)
    else:                               # 0.5, NaN, True, ...: the op's decoding validates them as eager calls do
        limit = repr(memory_limit)
    return text, limit


@functools.lru_cache(maxsize=256)
def _decoded(optimize: str, memory_limit: str, layout: str) -> Options:
    if optimize == "false":
        opt = False
    elif optimize.startswith("name:"):
        opt = optimize[5:]
    elif optimize.startswith("path!"):
        raise PathError(NOT_A_PATH + optimize[5:])
    elif optimize.startswith("path:"):
        body = optimize[5:]
        try:
            opt = tuple(tuple(int(i) for i in pair.split(",") if i) for pair in body.split(";")) if body else ()
        except ValueError:
            raise PathError(NOT_A_PATH + repr(body)) from None
    else:
        opt = optimize
    # the eager call's options: the op's calls and eager ones share their plans, and explain names what the op ran
    return Options.of(opt, _decoded_limit(memory_limit), None, layout or None)


def _decoded_limit(text: str):
    """The ``memory_limit`` that :func:`encode` wrote as ``text``: None, an int, a float, or
    a string (``"max_input"``; anything else is refused by :meth:`Options.of`)."""
    if not text:
        return None
    if text.startswith("str:"):
        return text[4:]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def cache_clear() -> None:
    """Forget the interned options (they are rebuilt on the next call); the default stays."""
    with _lock:
        INTERNED.clear()
        _by_value.clear()
        _by_value[(AUTO, None, None, None)] = DEFAULT
    _decoded.cache_clear()


def cache_size() -> int:
    """How many options are interned besides the default."""
    return len(_by_value) - 1


__all__ = ["Options", "callers_optimizer", "encode", "memory_limit_of", "normalized_optimize", "plain_limit",
           "layout_message", "LAYOUTS", "AUTO", "CONTIGUOUS", "ANY",
           "COTENGRA", "LEFT_TO_RIGHT", "INTERNED", "DEFAULT", "DEFAULT_OPTIMIZE",
           "torch_optimize"]

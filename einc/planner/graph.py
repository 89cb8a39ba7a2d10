"""Stage 2, graph: :class:`Equation` + shapes -> :class:`ContractionGraph`.

Pure Python.  Expands ellipses into concrete indices, checks every size, and
resolves broadcasting: a dimension of size 1 that meets a larger size elsewhere is
given an index of its own that nothing else shares, so later stages simply sum it
away (for a size-1 dimension that is a squeeze).  After this stage an index is an
int, and each index has one size.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OperandCountError, ShapeError, caret
from .equation import ELLIPSIS, Equation, spaced_names_hint


@dataclass(frozen=True)
class ContractionGraph:
    """Operands × indices.

    ``inputs[k]`` lists operand ``k``'s index per dimension (an index repeats for a
    diagonal); ``output`` the result's indices in order; ``sizes[i]`` and
    ``names[i]`` the size and display name of index ``i``.
    """

    inputs: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]
    sizes: tuple[int, ...]
    names: tuple[str, ...]

    @property
    def num_operands(self) -> int:
        return len(self.inputs)

    def term(self, indices) -> str:
        """Display string of a list of indices, e.g. ``'bij'``."""
        return "".join(self.names[i] for i in indices)

    def __str__(self) -> str:
        return ",".join(self.term(t) for t in self.inputs) + "->" + self.term(self.output)


def build(eq: Equation, shapes) -> ContractionGraph:
    """Resolve ``eq`` against operand ``shapes`` (sequences of ints).

    >>> from einc.planner.equation import parse
    >>> str(build(parse("ij,jk->ik"), [(2, 3), (3, 4)]))
    'ij,jk->ik'
    """
    shapes, width, expanded, size = _labelled(eq, shapes)
    ids: dict[str, int] = {}        # each index's name -> its number, in order of first appearance
    for labels in expanded:
        for label in labels:
            if label not in ids:
                ids[label] = len(ids)

    # A size-1 dimension against a larger size gets an index of its own.
    inputs = []
    for k, (labels, shape) in enumerate(zip(expanded, shapes)):
        term = []
        for label, n in zip(labels, shape):
            if n == 1 and size[label] != 1:
                own = f"{label}'{k}"
                term.append(ids.setdefault(own, len(ids)))
            else:
                term.append(ids[label])
        inputs.append(tuple(term))

    out_labels = _expand(eq.output, width, width)
    output = tuple([ids.setdefault(label, len(ids)) for label in out_labels])
    sizes = [size.get(name, 1) for name in ids]
    display = [name if len(name) == 1 else _display(name) for name in ids]
    return ContractionGraph(tuple(inputs), output, tuple(sizes), tuple(display))


def broadcast(eq: Equation, shapes) -> frozenset[tuple[int, int]]:
    """``(operand, dimension)`` of each dimension of size 1 that meets a larger size, which
    :func:`build` gives an index of its own.

    >>> from einc.planner.equation import parse
    >>> sorted(broadcast(parse("ij,jk->ik"), [(2, 1), (3, 4)]))
    [(0, 1)]
    """
    shapes, _, expanded, size = _labelled(eq, shapes)
    return frozenset((k, d) for k, (labels, shape) in enumerate(zip(expanded, shapes))
                     for d, (label, n) in enumerate(zip(labels, shape)) if n == 1 and size[label] != 1)


def _labelled(eq: Equation, shapes):
    """``(shapes, width, labels, size)``: the shapes as tuples (as many as the equation's
    operands, checked), the ellipsis's widest extent, each operand's labels with its ellipsis
    spelled out, and each label's size (checked)."""
    shapes = [tuple(s) for s in shapes]
    if len(shapes) != eq.num_operands:
        raise OperandCountError(f"einsum(): the equation names {eq.num_operands} operands but {len(shapes)} "
                                f"shapes were given\n  {eq.text}")
    many = len(shapes) >= 3       # torch.einsum then fails in opt_einsum first, with its wording
    ell_dims = _ellipsis_dims(eq, shapes, many)
    width = max(ell_dims, default=0)
    expanded = [_expand(labels, n, width) for labels, n in zip(eq.inputs, ell_dims)]
    return shapes, width, expanded, _label_sizes(eq, expanded, shapes, many)


def cycles(inputs) -> int:
    """The independent cycles of a network of tensors ``inputs`` (index sets; an index on
    k tensors joins them as k - 1 edges would): its cyclomatic number, 0 for a tree or a
    chain.

    >>> cycles([{0, 1}, {1, 2}, {2, 0}]), cycles([{0}, {0, 1}, {1}])
    (1, 0)
    """
    owner: dict = {}
    parent = list(range(len(inputs)))

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k
    found = 0
    for k, term in enumerate(inputs):
        for i in term:
            j = owner.setdefault(i, k)
            if j != k:
                a, b = root(j), root(k)
                if a == b:
                    found += 1      # the edge closes a cycle
                else:
                    parent[a] = b
    return found


def _ellipsis_dims(eq: Equation, shapes, many: bool) -> list[int]:
    """How many dimensions each operand's ellipsis covers (0 without one); ``many``: three
    operands or more, where torch.einsum words its errors as opt_einsum does."""
    ell_dims = []
    for k, (labels, shape) in enumerate(zip(eq.inputs, shapes)):
        named = len(labels) - (ELLIPSIS in labels)
        if ELLIPSIS in labels:
            if len(shape) < named:
                head = ("Ellipses lengths do not match" if many else
                        f"the number of subscripts in the equation ({named}) is more than the number of "
                        f"dimensions ({len(shape)}) for operand {k}")
                raise ShapeError(
                    f"einsum(): {head}: operand {k} ('{eq.term(k)}') has {len(shape)} dimensions, fewer than "
                    f"the {named} subscripts it names besides '...'{spaced_names_hint(eq.text)}\n{eq.where(k)}")
            ell_dims.append(len(shape) - named)
        else:
            if len(shape) != named:
                head = (f"Einstein sum subscript '{eq.term(k)}' does not contain the correct number of indices "
                        f"for operand {k}" if many else
                        f"the number of subscripts in the equation ({named}) does not match the number of "
                        f"dimensions ({len(shape)}) for operand {k} and no ellipsis was given")
                raise ShapeError(
                    f"einsum(): {head}: operand {k} ('{eq.term(k)}') has shape {tuple(shape)}, "
                    f"{len(shape)} dimensions for {named} subscripts{spaced_names_hint(eq.text)}\n{eq.where(k)}")
            ell_dims.append(0)
    return ell_dims


def _expand(labels, n_ell: int, width: int):
    """``labels`` with the ellipsis spelled out: ellipsis dimension j (0 = leftmost of the
    widest ellipsis, ``width`` dimensions) is the pseudo-label ``...j``."""
    if ELLIPSIS not in labels:
        return labels
    out = []
    for label in labels:
        if label == ELLIPSIS:
            out.extend(f"...{width - n_ell + j}" for j in range(n_ell))
        else:
            out.append(label)
    return out


def _label_sizes(eq: Equation, expanded, shapes, many: bool) -> dict[str, int]:
    """One size per label: equal sizes, or 1 broadcasting against the other."""
    size: dict[str, int] = {}
    first: dict[str, int] = {}
    for k, (labels, shape) in enumerate(zip(expanded, shapes)):
        seen_here: dict[str, int] = {}
        for d, (label, n) in enumerate(zip(labels, shape)):
            if label in seen_here and seen_here[label] != n:
                head = (f"Size of label '{label}' for operand {k} ({seen_here[label]}) does not match previous "
                         f"terms ({n})" if many else
                        f"subscript {label} is repeated for operand {k} but the sizes don't match, "
                        f"{n} != {seen_here[label]}")
                raise ShapeError(
                    f"einsum(): {head}: operand {k} ('{eq.term(k)}') has shape {tuple(shape)}; a repeated "
                    f"subscript takes a diagonal of equal sizes\n{eq.where(k, label)}")
            seen_here[label] = n
            old = size.get(label)
            if old is None or old == 1:
                if old is None or n != 1:      # (the operand that gave the size the message names)
                    first[label] = k
                size[label] = n
            elif n != 1 and n != old:
                ellipsis = label.startswith("...")
                if many:
                    # torch's sentence (opt_einsum's), with its sizes the right way round
                    head = f"Size of label '{label}' for operand {k} ({n}) does not match previous terms ({old})"
                elif ellipsis:
                    head = (f"dimension {d} covered by ellipsis in operand {k} has size {n} which does not "
                            f"broadcast with previously seen ellipsis with size {old} for the respective dimension")
                else:
                    head = (f"subscript {label} has size {n} for operand {k} which does not broadcast with "
                            f"previously seen size {old}")
                what = f"dimension {label[3:]} of the ellipsis" if ellipsis else f"subscript {label!r}"
                raise ShapeError(
                    f"einsum(): {head}: {what} has size {n} in operand {k} ('{eq.term(k)}') but size {old} in "
                    f"operand {first[label]} ('{eq.term(first[label])}'); sizes must match or be 1\n"
                    f"{eq.where(k, label if not ellipsis else ELLIPSIS)}")

    return size


def _display(name: str) -> str:
    """Short display name: ``a`` stays, ellipsis dim ``...2`` shows as ``…2``."""
    base = name.split("'")[0]
    return "…" + base[3:] if base.startswith("...") else base


__all__ = ["ContractionGraph", "broadcast", "build", "caret"]

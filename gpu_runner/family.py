"""Templated families: enumerate the valid knob settings and render one into a Candidate."""
from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any, Iterator, Mapping, Sequence

from klexpr import ExpressionError, parse_expression

from .candidate import Candidate
from .spec import (ArgSpec, KernelLaunch, LaunchStep, MemsetStep, Problem, SpecError, SpecErrors,
                   check_launch_limits)


# How big a family may be. Its knobs' value counts multiply into the combinations the walk below may
# visit, and a family that is too big costs the web process seconds and gigabytes before anything
# says no, so both numbers are checked here, where the Knobs page, an uploaded [family] and a problem
# folder all pass.
#
# The combinations (the product of the value counts) are checked before anything is enumerated. They
# bound the walk's time: sgemm, the largest bundled family, has 1,244,160 (12 knobs) and its walk takes
# about 2.5 s on a busy 2-core machine; 2^21 leaves it room, and the worst walk at the limit (a
# constraint over every knob, so none is pruned before the last) took about 10 s there.
MAX_COMBINATIONS = 1 << 21
# The variants (the combinations that satisfy the constraints) are held in memory, remembered per spec,
# and the template generator and its surrogate screen every one. The bundled families have 434 to
# 1,014; 65,536 is sixty times that and keeps a spec's settings within tens of megabytes. The walk
# stops at the first variant past it, so a family that has too many is never held whole.
MAX_VARIANTS = 1 << 16


def variant_id(knobs: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in knobs.items())


def combination_count(knobs: Mapping[str, Sequence]) -> int:
    """How many settings knobs with these values make, constraints aside."""
    return math.prod(len(values) for values in knobs.values())


def check_combinations(knobs: Mapping[str, Sequence]) -> int:
    """The combination count of `knobs`; a SpecError naming it and the limit when it is above
    MAX_COMBINATIONS. Counts only: nothing is enumerated."""
    count = combination_count(knobs)
    if count > MAX_COMBINATIONS:
        counts = " × ".join(f"{len(values)} ({name})" for name, values in knobs.items())
        raise SpecError("family.knobs", f"the knobs' values make {count:,} combinations ({counts}), more than the "
                                        f"{MAX_COMBINATIONS:,} a family may have; keep fewer values")
    return count


def check_family_size(problem: Problem) -> int:
    """The number of variants of `problem`'s family; a SpecError naming the count and the limit when
    its combinations are above MAX_COMBINATIONS (checked before any walk) or its variants above
    MAX_VARIANTS (the walk stops at the first one past it). For an upload or a problem folder to
    call before it is saved or searched; it takes as long as the walk, a few seconds at worst."""
    return sum(1 for _ in enumerate_variants(problem))


def enumerate_variants(problem: Problem) -> Iterator[dict[str, Any]]:
    """Every knob setting that satisfies all constraints in every size case, in knob order.

    A depth-first walk over the knobs that checks each constraint as soon as its last knob is set,
    so a family with a million combinations (sgemm) enumerates in seconds rather than minutes.
    A family above MAX_COMBINATIONS is refused before the walk, one above MAX_VARIANTS when the walk
    reaches its first variant past the limit (SpecError either way).

    A constraint that cannot be evaluated (division by zero) does not hold; a setting whose launch or
    temps cannot be evaluated, or break a CUDA launch limit, in some size case is left out
    (_launch_left_out). When no setting is left and one of these is why, SpecError says so: the first
    setting left out and its reason, and the first constraint that could not be evaluated.
    """
    family = _family(problem)
    combinations = check_combinations(family.knobs)
    names = list(family.knobs)
    position = {name: i for i, name in enumerate(names)}
    # A constraint over knobs alone comes out the same in every size case, so it is checked in the
    # first case only: a walk near MAX_COMBINATIONS spends its time here.
    in_first: list[list] = [[] for _ in names]     # every constraint due at that depth
    in_others: list[list] = [[] for _ in names]    # those that name a size
    sizes = problem.size_names
    for number, constraint in enumerate(family.constraints):
        used = [position[n] for n in constraint.names if n in position]
        depth = max(used) if used else 0
        in_first[depth].append((number, constraint))
        if set(constraint.names) & sizes:
            in_others[depth].append((number, constraint))
    envs = [dict(case.sizes) for case in problem.sizes]
    chosen: dict[str, Any] = {}
    left_out: list[tuple[str, SpecError]] = []     # the first variant whose launch is left out, and why
    unevaluated: list[SpecError] = []              # the first constraint that could not be evaluated

    def holds(depth: int) -> bool:
        for index, env in enumerate(envs):
            for number, constraint in in_first[depth] if index == 0 else in_others[depth]:
                try:
                    if not constraint.evaluate(env):
                        return False
                except ExpressionError as exc:
                    if not unevaluated:
                        unevaluated.append(_unevaluated_constraint(problem, number, constraint, env, index, exc))
                    return False
        return True

    def walk(depth: int) -> Iterator[dict[str, Any]]:
        if depth == len(names):
            reason = _launch_left_out(problem, envs)
            if reason is None:
                yield dict(chosen)
            elif not left_out:
                left_out.append((variant_id(chosen), reason))
            return
        name = names[depth]
        for value in family.knobs[name]:
            chosen[name] = value
            for env in envs:
                env[name] = value
            if holds(depth):
                yield from walk(depth + 1)
        del chosen[name]
        for env in envs:
            env.pop(name, None)

    count = 0
    for count, variant in enumerate(walk(0), start=1):
        if count > MAX_VARIANTS:
            raise SpecError("family.knobs", f"more than {MAX_VARIANTS:,} of the knobs' {combinations:,} combinations "
                                            f"satisfy the constraints, and a family may have at most {MAX_VARIANTS:,} "
                                            "variants; keep fewer values or constrain them")
        yield variant
    if count:
        return
    errors: list[SpecError] = []
    if left_out:
        variant, reason = left_out[0]
        if isinstance(reason, _LimitBroken):
            what = "breaks a CUDA launch limit"
        else:
            what = "has a launch plan that fails in some size case"
        errors.append(SpecError(reason.field, f"every setting that satisfies the constraints {what}, "
                                              f"for instance {variant}: {reason.message}"))
    if unevaluated:
        errors.append(unevaluated[0])
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)


def _unevaluated_constraint(problem: Problem, number: int, constraint, env: Mapping[str, Any], case: int,
                            exc: ExpressionError) -> SpecError:
    """The sentence for a constraint that could not be evaluated: its text, the knobs (and size case) it
    was evaluated for, and why, e.g. "the constraint 'BLOCK // 0 == 1' could not be evaluated for
    BLOCK=128: division by zero"."""
    knobs = [f"{name}={env[name]}" for name in _family(problem).knobs if name in constraint.names]
    where = []
    if knobs:
        where.append(f"for {', '.join(knobs)}")
    if set(constraint.names) & problem.size_names:
        where.append(f"in size case '{problem.sizes[case].name}'")
    why = str(exc).removeprefix(f"'{constraint.text}': ")
    return SpecError(f"family.constraints[{number}]",
                     f"no setting of the knobs satisfies the constraints, and the constraint '{constraint.text}' "
                     f"could not be evaluated{' ' if where else ''}{' '.join(where)}: {why} (a constraint that "
                     "cannot be evaluated does not hold)")


class _LimitBroken(SpecError):
    """A variant's launch that CUDA would refuse (check_launch_limits' sentence and field)."""


def _launch_left_out(problem: Problem, envs: list[dict[str, Any]]) -> SpecError | None:
    """Why the variant whose knobs are set in `envs` (one per size case, sizes and knobs) is left out of the
    family, or None. It is left out as a broken constraint is, rather than offered to a search that would
    spend a compile and a GPU slot to learn that it fails at every launch, when in some size case:

    - one of its steps' `when`, a temp's shape, or a kept step's grid, block or shared cannot be evaluated
      (a division by zero, a grid such as 'N / (256 * PER_THREAD)' that is not integral for PER_THREAD=3),
      or a temp has no elements, a grid or block dimension is not positive or shared memory is negative
      (check_candidate refuses such a launch; the message is an ordinary SpecError);
    - no step's `when` holds (render_variant refuses such a variant);
    - a step asks for more threads, block or grid dimensions or dynamic shared memory than the card
      allows (_LimitBroken).

    The steps are those render_variant keeps: a `when` names knobs only (gpu_runner.spec), so it is
    read once."""
    family = _family(problem)
    steps = []
    for index, step in enumerate(family.launch):
        try:
            if step.when is not None and not step.when.evaluate(envs[0]):
                continue
        except ExpressionError as exc:
            return SpecError(f"family.launch[{index}].when", str(exc))
        steps.append((index, step))
    if not steps:
        return SpecError("family.launch", "no step's 'when' holds")
    for case, env in zip(problem.sizes, envs):
        for index, temp in enumerate(family.temps):
            at = f"family.temps[{index}] ('{temp.name}').shape"
            try:
                if temp.numel(env) <= 0:
                    return SpecError(at, f"has no elements for size case '{case.name}'")
            except ExpressionError as exc:
                return SpecError(at, f"{exc} (size case '{case.name}')")
        for index, step in steps:
            if not isinstance(step, KernelLaunch):
                continue
            at = f"family.launch[{index}]"
            parts = [(f"{at}.grid[{j}]", e) for j, e in enumerate(step.grid)] + \
                    [(f"{at}.block[{j}]", e) for j, e in enumerate(step.block)] + [(f"{at}.shared", step.shared)]
            values = []
            for field, expression in parts:
                try:
                    values.append(expression.evaluate_int(env))
                except ExpressionError as exc:
                    return SpecError(field, f"{exc} (size case '{case.name}')")
            grid = tuple(values[:len(step.grid)]) + (1,) * (3 - len(step.grid))
            block = tuple(values[len(step.grid):-1]) + (1,) * (3 - len(step.block))
            shared = values[-1]
            if min(grid) <= 0 or min(block) <= 0 or shared < 0:
                return SpecError(at, f"gives grid {grid}, block {block}, shared {shared} for size case '{case.name}'")
            try:
                check_launch_limits(grid, block, shared, at, case.name)
            except SpecError as exc:
                return _LimitBroken(exc.field, exc.message)
    return None


# Remembered as the knob names and a tuple of values per variant, about a third of the memory of a dict each.
_VARIANTS: "OrderedDict[str, tuple[tuple[str, ...], tuple[tuple, ...]]]" = OrderedDict()
_VARIANTS_LOCK = threading.Lock()
_VARIANTS_KEPT = 16


def valid_variants(problem: Problem) -> list[dict[str, Any]]:
    """enumerate_variants as a list, remembered per spec in this process.

    Finding sgemm's 1,014 valid settings among 1.2 million combinations takes seconds, and the app
    builds a run's template generator again for every task (each batch of steps, each measurement
    that comes back), so a process enumerates each spec once. Problems are keyed by their spec hash;
    one without a hash is enumerated every time. At most MAX_VARIANTS (see enumerate_variants)."""
    key = problem.spec_hash
    if key:
        with _VARIANTS_LOCK:
            kept = _VARIANTS.get(key)
            if kept is not None:
                _VARIANTS.move_to_end(key)
                names, rows = kept
                return [dict(zip(names, row)) for row in rows]
    names = tuple(_family(problem).knobs)
    rows = tuple(tuple(variant[name] for name in names) for variant in enumerate_variants(problem))
    if key:
        with _VARIANTS_LOCK:
            _VARIANTS[key] = (names, rows)
            while len(_VARIANTS) > _VARIANTS_KEPT:
                _VARIANTS.popitem(last=False)
    return [dict(zip(names, row)) for row in rows]


def _satisfied(problem: Problem, knobs: Mapping[str, Any], sizes: Mapping[str, int]) -> bool:
    env = {**sizes, **knobs}
    for constraint in problem.family.constraints:  # type: ignore[union-attr]
        try:
            if not constraint.evaluate(env):
                return False
        except ExpressionError:
            return False
    return True


def render_source(problem: Problem, knobs: Mapping[str, Any]) -> str:
    """'#define KNOB value' lines + the template; a string knob becomes '#define KNOB_<value> 1'."""
    lines = []
    for name, value in knobs.items():
        if isinstance(value, str):
            lines.append(f"#define {name}_{value} 1")
        else:
            lines.append(f"#define {name} {value}")
    return "\n".join(lines) + "\n" + _family(problem).source


def render_variant(problem: Problem, knobs: Mapping[str, Any]) -> Candidate:
    family = _family(problem)
    if set(knobs) != set(family.knobs):
        missing = set(family.knobs) - set(knobs)
        extra = set(knobs) - set(family.knobs)
        what = f"missing {sorted(missing)}" if missing else f"unknown {sorted(extra)}"
        raise SpecError("knobs", f"a variant sets every knob once ({what})")
    for name, value in knobs.items():
        if value not in family.knobs[name]:
            raise SpecError(f"knobs.{name}", f"{value!r} is not one of {list(family.knobs[name])}")
    for case in problem.sizes:
        if not _satisfied(problem, knobs, case.sizes):
            raise SpecError("knobs", f"{variant_id(knobs)} breaks a constraint (size case '{case.name}')")
    ordered = {name: knobs[name] for name in family.knobs}
    sizes = problem.size_names
    temps = tuple(ArgSpec(t.name, "temp", t.dtype,
                          tuple(_bind(d.substitute(ordered), sizes) for d in t.shape)) for t in family.temps)
    launch: list[LaunchStep] = []
    env = {**problem.default_case.sizes, **ordered}
    for step in family.launch:
        if step.when is not None and not step.when.evaluate(env):
            continue
        if isinstance(step, MemsetStep):
            launch.append(MemsetStep(step.arg, step.value))
            continue
        launch.append(KernelLaunch(
            kernel=step.kernel,
            grid=tuple(_bind(e.substitute(ordered), sizes) for e in step.grid),
            block=tuple(_bind(e.substitute(ordered), sizes) for e in step.block),
            shared=_bind(step.shared.substitute(ordered), sizes),
            args=step.args))
    if not launch:
        raise SpecError("family.launch", f"no step's 'when' holds for {variant_id(ordered)}")
    return Candidate(source=render_source(problem, ordered), launch=tuple(launch), temps=temps,
                     compile_options=family.compile_options, knobs=ordered, name=variant_id(ordered))


def _bind(text: str, sizes: frozenset[str]):
    return parse_expression(text, sizes)


def _family(problem: Problem):
    if problem.family is None:
        raise SpecError("family", f"problem '{problem.name}' declares no [family]")
    return problem.family

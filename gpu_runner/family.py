"""Templated families: enumerate the valid knob settings and render one into a Candidate."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Iterator, Mapping

from klexpr import ExpressionError, parse_expression

from .candidate import Candidate
from .spec import ArgSpec, KernelLaunch, LaunchStep, MemsetStep, Problem, SpecError


def variant_id(knobs: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in knobs.items())


def enumerate_variants(problem: Problem) -> Iterator[dict[str, Any]]:
    """Every knob setting that satisfies all constraints in every size case, in knob order.

    A depth-first walk over the knobs that checks each constraint as soon as its last knob is set,
    so a family with a million combinations (sgemm) enumerates in seconds rather than minutes.
    """
    family = _family(problem)
    names = list(family.knobs)
    position = {name: i for i, name in enumerate(names)}
    due: list[list] = [[] for _ in names]
    for constraint in family.constraints:
        used = [position[n] for n in constraint.names if n in position]
        due[max(used) if used else 0].append(constraint)
    envs = [dict(case.sizes) for case in problem.sizes]
    chosen: dict[str, Any] = {}

    def holds(constraints) -> bool:
        for env in envs:
            for constraint in constraints:
                try:
                    if not constraint.evaluate(env):
                        return False
                except ExpressionError:
                    return False
        return True

    def walk(depth: int) -> Iterator[dict[str, Any]]:
        if depth == len(names):
            yield dict(chosen)
            return
        name = names[depth]
        for value in family.knobs[name]:
            chosen[name] = value
            for env in envs:
                env[name] = value
            if holds(due[depth]):
                yield from walk(depth + 1)
        del chosen[name]
        for env in envs:
            env.pop(name, None)

    yield from walk(0)


_VARIANTS: "OrderedDict[str, tuple[dict, ...]]" = OrderedDict()
_VARIANTS_LOCK = threading.Lock()
_VARIANTS_KEPT = 16


def valid_variants(problem: Problem) -> list[dict[str, Any]]:
    """enumerate_variants as a list, remembered per spec in this process.

    Finding sgemm's 1,014 valid settings among 1.2 million combinations takes seconds, and the app
    builds a run's template generator again for every task (each batch of steps, each measurement
    that comes back), so a process enumerates each spec once. Problems are keyed by their spec hash;
    one without a hash is enumerated every time."""
    key = problem.spec_hash
    if key:
        with _VARIANTS_LOCK:
            kept = _VARIANTS.get(key)
            if kept is not None:
                _VARIANTS.move_to_end(key)
                return [dict(v) for v in kept]
    variants = list(enumerate_variants(problem))
    if key:
        with _VARIANTS_LOCK:
            _VARIANTS[key] = tuple(dict(v) for v in variants)
            while len(_VARIANTS) > _VARIANTS_KEPT:
                _VARIANTS.popitem(last=False)
    return variants


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

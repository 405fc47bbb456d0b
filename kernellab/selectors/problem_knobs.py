"""The knobs KernelLab finds in a problem's reference kernel, and which of them the problem uses now."""
from __future__ import annotations

from dataclasses import dataclass, field

from kernellab.models import Problem

# problem_knobs_save writes the [family] below this line, so it can be found, replaced or removed.
AUTO_FAMILY_MARKER = "# [family] written by KernelLab from the knobs confirmed on the problem page"


@dataclass
class KnobRow:
    name: str
    kind: str
    where: str
    original: int
    proposed: list[int]
    values: list[int]     # what the problem uses now, or the proposal where the knob is not used yet
    used: bool


@dataclass
class ProblemKnobs:
    rows: list[KnobRow] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    confirmed: bool = False          # the problem's [family] came from this page
    unavailable: str = ""            # why this problem offers no automatic knobs


def spec_without_auto_family(spec_toml: str) -> str:
    head, marker, _ = spec_toml.partition(AUTO_FAMILY_MARKER)
    return head.rstrip() + "\n" if marker else spec_toml


def has_own_family(spec_toml: str) -> bool:
    """Whether a spec has a [family] table its author wrote (not this page): keyed on the spec, not on
    a stored family.cu, which an upload once kept without a [family] to read it (the runner ignores it)."""
    import tomllib

    try:
        return "family" in tomllib.loads(spec_without_auto_family(spec_toml))
    except tomllib.TOMLDecodeError:
        return False


def problem_knobs(*, problem: Problem) -> ProblemKnobs:
    from gpu_runner.auto_knobs import propose_knobs
    from gpu_runner.spec import parse_problem

    confirmed = AUTO_FAMILY_MARKER in problem.spec_toml
    if not confirmed and has_own_family(problem.spec_toml):
        return ProblemKnobs(unavailable="this problem has its own [family], written with its spec")
    try:
        base = parse_problem(spec_without_auto_family(problem.spec_toml), problem.reference.source)
        current = parse_problem(problem.spec_toml, problem.reference.source, problem.family_source or None)
        proposal = propose_knobs(base)
    except Exception as exc:  # a PyTorch reference or a spec the runner no longer reads
        return ProblemKnobs(unavailable=str(exc).rstrip(".") or "its spec cannot be read")
    in_use = dict(current.family.knobs) if current.family else {}
    rows = [KnobRow(k.name, k.kind, k.where, k.original, list(k.values),
                    list(in_use.get(k.name, k.values)), k.name in in_use or not confirmed)
            for k in proposal.knobs]
    constraints = [c.text for c in current.family.constraints] if current.family else list(proposal.constraints)
    return ProblemKnobs(rows=rows, constraints=constraints, skipped=proposal.skipped, confirmed=confirmed)

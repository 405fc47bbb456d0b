"""Several generators over one tree: the recipes' cures and the template of the kernel's own knobs.

At the root each generator gets its share of the children (the first the larger share); below it,
a node is expanded by the first generator that has anything for it, so a cure's variants stay with
the recipes and the knob variants of the user's kernel with the template. Failed proposals (a
recipe that cannot apply) pass through unchanged."""
from __future__ import annotations

from search_engine.candidates import candidate_hash
from search_engine.generators.base import Proposal, ProposalContext


class CombinedGenerator:
    name = "combined"

    def __init__(self, generators: list) -> None:
        if not generators:
            raise ValueError("A combined generator needs at least one generator.")
        self.generators = list(generators)
        self.name = "+".join(getattr(g, "name", "generator") for g in self.generators)

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        if context.parent.get("source") == context.reference.get("source") and \
                context.parent.get("knobs") == context.reference.get("knobs"):
            return self._at_root(context, n)
        for generator in self.generators:
            proposals = generator.propose(context, n)
            if proposals:
                return proposals
        return []

    def _at_root(self, context: ProposalContext, n: int) -> list[Proposal]:
        out: list[Proposal] = []
        known = set(context.known_hashes)
        left = n
        for i, generator in enumerate(self.generators):
            others = len(self.generators) - i - 1
            share = left if others == 0 else max(1, left - others * max(1, n // (2 * len(self.generators))))
            proposals = generator.propose(ProposalContext(**{**context.__dict__, "known_hashes": known}), share)
            for proposal in proposals:
                if proposal.candidate is not None:
                    known.add(candidate_hash(proposal.candidate))
            out += proposals
            left = max(0, n - sum(1 for p in out if p.candidate is not None))
        return out

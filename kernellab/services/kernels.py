from __future__ import annotations

from django.db import IntegrityError, transaction

from kernellab.models import Kernel, kernel_content_hash


def kernel_get_or_create(*, candidate: dict, compiler_facts: dict | None = None, compile_errors: list | None = None) -> Kernel:
    """Store a candidate once per content; later facts fill in what an earlier save lacked.

    The row is shared by every node with this content, in any workspace, and keeps the first writer's name: a node
    keeps its own (Node.name, set where the node is made); never show `Kernel.name` for a node."""
    digest = kernel_content_hash(candidate["source"], candidate.get("launch"), candidate.get("compile_options"))
    kernel = Kernel.objects.filter(content_hash=digest).first()
    if kernel is None:
        try:
            with transaction.atomic():
                kernel = Kernel.objects.create(
                    content_hash=digest,
                    source=candidate["source"],
                    launch=candidate.get("launch") or [],
                    temps=candidate.get("temps") or [],
                    compile_options=candidate.get("compile_options") or [],
                    knobs=candidate.get("knobs"),
                    name=(candidate.get("name") or "")[:200],
                    compiler_facts=compiler_facts or {},
                    compile_errors=compile_errors or [],
                )
        except IntegrityError:  # a concurrent writer stored the same content first
            kernel = Kernel.objects.get(content_hash=digest)
    if (compiler_facts and not kernel.compiler_facts) or (compile_errors and not kernel.compile_errors):
        kernel.compiler_facts = kernel.compiler_facts or compiler_facts or {}
        kernel.compile_errors = kernel.compile_errors or compile_errors or []
        kernel.save(update_fields=["compiler_facts", "compile_errors"])
    return kernel

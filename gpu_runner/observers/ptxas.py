"""ptxas resource usage (registers, shared memory, spills, stack) and SASS opcode counts."""
from __future__ import annotations

from ..compiler import DEFAULT_ARCH, ToolMissing, compile_cubin
from ..result import CompilerFacts
from . import ObserverUnavailable


class PtxasObserver:
    def __init__(self, arch: str = DEFAULT_ARCH):
        self.arch = arch

    def facts(self, source: str, options=()) -> CompilerFacts:
        try:
            output = compile_cubin(source, options, self.arch)
        except ToolMissing as exc:
            raise ObserverUnavailable(str(exc)) from None
        if output.report.facts is None:
            raise ObserverUnavailable(output.report.summary())
        return output.report.facts

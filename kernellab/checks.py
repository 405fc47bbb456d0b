"""System checks of what `check --deploy` must see before a team exposes the server."""
from __future__ import annotations

from django.core.checks import Error, Tags, Warning, register


@register(Tags.security, deploy=True)
def compile_sandbox_check(app_configs, **kwargs):
    from gpu_runner.compile_sandbox import SandboxUnavailable, sandbox_status

    try:
        status = sandbox_status()
    except SandboxUnavailable as exc:
        return [Error(str(exc), id="kernellab.E001")]
    if status.mode != "bwrap":
        return [Warning(f"Uploaded and generated kernels are compiled outside a sandbox: {status.reason}.",
                        hint="Install bubblewrap (apt-get install bubblewrap) or set KERNELLAB_COMPILE_SANDBOX=bwrap "
                             "to refuse compiling without it.", id="kernellab.W001")]
    return []


@register(Tags.caches, deploy=True)
def cache_reachable_check(app_configs, **kwargs):
    """The shared cache holds the login lockout's counts: one that does not answer turns the lockout off without
    a word (services/login_throttle.py fails open), so a team setup must see it before it goes live."""
    from kernellab.config import cache_problem

    problem = cache_problem()
    if problem:
        return [Error(problem, hint="Log-ins are not throttled and highlighted sources are not shared until the "
                                    "cache answers.", id="kernellab.E002")]
    return []

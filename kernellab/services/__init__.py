"""Every write in KernelLab goes through a function here: `<noun>_<verb>`, keyword arguments,
atomic, refusing with ServiceError (one sentence) and changing nothing when it refuses."""
from kernellab.services.errors import ServiceError, PermissionDenied, IllegalTransition  # noqa: F401

def navigation(request) -> dict:
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    from kernellab.selectors.workspaces import workspace_list_for_user

    return {"nav_workspaces": list(workspace_list_for_user(user=request.user))}


def measurement_source(request) -> dict:
    """Whether measurements here are real: without a live GPU worker they come from recorded data,
    and every page says so."""
    from kernellab.selectors.workers import gpu_queues_with_live_worker

    return {"replay_only": not gpu_queues_with_live_worker()}


def request_limits(request) -> dict:
    """What the server reads from one form post (static/js/forms.js keeps a larger form from being sent)."""
    from django.conf import settings

    return {"post_limit_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE}

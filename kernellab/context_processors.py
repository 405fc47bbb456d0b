def navigation(request) -> dict:
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    from kernellab.selectors.workspaces import workspace_list_for_user

    return {"nav_workspaces": list(workspace_list_for_user(user=request.user))}

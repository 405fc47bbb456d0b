class ServiceError(Exception):
    """A refused operation; str(error) is a sentence fit to show the user."""


class PermissionDenied(ServiceError):
    pass


class IllegalTransition(ServiceError):
    pass

"""What the API server's refusals mean to the operator, read from its Status answers."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException


def namespace_closing(error: BaseException) -> bool:
    """ERROR says the object's namespace is being deleted (403) or is gone (404): nothing more can be made there."""
    if not isinstance(error, ApiException) or error.status not in (403, 404):
        return False
    try:
        body = json.loads(error.body or "{}")
    except ValueError:
        return False
    if not isinstance(body, dict):
        return False
    details = body.get("details")
    if error.status == 404:
        return isinstance(details, dict) and details.get("kind") == "namespaces"
    return "is being terminated" in str(body.get("message", ""))


class ForeignObjectError(ApiException):  # type: ignore[misc]  # the client's exceptions are untyped
    """A create answered AlreadyExists, and the object of that name is not the operator's: it is not used.

    A tenant may make first, under the name the operator will use, a ResourceClaimTemplate that
    asks every GPU of a node, or a pod or Service of its own: taken as ours, it would be held,
    charged and relied on as what the operator built. The job says so and what to do.
    """

    def __init__(self, kind: str, namespace: str, name: str, owner_kind: str) -> None:
        what = "service" if owner_kind == "InferenceService" else "job"
        self.message = f"{kind} {namespace}/{name} exists and is not aisched's: delete it or rename the {what}"
        super().__init__(status=409, reason="AlreadyExists")
        self.body = json.dumps({"message": self.message})

    def __str__(self) -> str:
        return self.message


def refused_create(error: BaseException) -> str | None:
    """What the API server said refusing a create (admission, Pod Security, an invalid object), or that the
    object exists and is someone else's; None for any other failure, which a retry may cure (a namespace
    being deleted is `namespace_closing`'s)."""
    if isinstance(error, ForeignObjectError):
        return error.message
    if not isinstance(error, ApiException) or error.status not in (400, 403, 422) or namespace_closing(error):
        return None
    try:
        body = json.loads(error.body or "{}")
    except ValueError:
        body = None
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or error.reason or f"HTTP {error.status}")

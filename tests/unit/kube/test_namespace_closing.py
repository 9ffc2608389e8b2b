"""Which API errors say a job's namespace is being deleted: the controller then leaves its jobs alone."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from aisched.kube.api_errors import namespace_closing


@pytest.mark.parametrize(
    ("status", "body", "closing"),
    [
        (403, '{"message": "unable to create new content in namespace t because it is being terminated"}', True),
        (404, '{"reason": "NotFound", "details": {"name": "t", "kind": "namespaces"}}', True),
        (404, '{"reason": "NotFound", "details": {"name": "w0", "kind": "pods"}}', False),
        (403, '{"message": "pods is forbidden: User cannot create resource"}', False),
        (403, "not json", False),
        (500, '{"message": "it is being terminated"}', False),
    ],
)
def test_only_a_namespace_being_deleted_or_gone_reads_as_closing(status: int, body: str, closing: bool) -> None:
    error = ApiException(status=status)
    error.body = body
    assert namespace_closing(error) is closing

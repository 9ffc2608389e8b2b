from __future__ import annotations

import pytest

from aisched.testing.api_proxy import collection_of


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/pods", "pods"),
        ("/api/v1/namespaces/ns/pods", "pods"),
        ("/api/v1/namespaces/ns/pods/p", None),
        ("/api/v1/namespaces/ns/pods/p/status", None),
        ("/api/v1/namespaces", "namespaces"),
        ("/api/v1/namespaces/ns", None),
        ("/apis/aisched.io/v1alpha1/trainingjobs", "trainingjobs"),
        ("/apis/aisched.io/v1alpha1/namespaces/ns/trainingjobs", "trainingjobs"),
        ("/apis/aisched.io/v1alpha1/namespaces/ns/trainingjobs/j", None),
        ("/version", None),
    ],
)
def test_the_proxy_tells_collections_from_single_objects(path: str, resource: str | None) -> None:
    assert collection_of(path) == resource

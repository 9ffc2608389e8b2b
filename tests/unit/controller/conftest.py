from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.controller.kube_double import KubeDouble


@pytest.fixture
def kube() -> Iterator[KubeDouble]:
    """A KubeClient that allows nothing until the test says so, and fails the test on any other call."""
    double = KubeDouble()
    yield double
    double.assert_only_expected_calls()

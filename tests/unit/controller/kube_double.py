"""A KubeClient for controller unit tests that forbids every call the test did not set up.

As kopf's tests do (`side_effect=Exception('Must not be called!')`): each method of
the real client is there, with its signature, and raises unless the test allowed it.
The controller's work queue logs and retries a failing reconcile rather than raise,
so a forbidden call is also recorded, and `assert_only_expected_calls` fails the test on it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any
from unittest.mock import create_autospec

from aisched.kube.client import KubeClient

KUBE_METHODS = tuple(name for name, _ in inspect.getmembers(KubeClient, inspect.isfunction) if not name.startswith("_"))


class UnexpectedKubeCallError(AssertionError):
    pass


class KubeDouble:
    """`client` goes to the controller; `allow` and `answer` say which calls it may make."""

    def __init__(self) -> None:
        self.client: Any = create_autospec(KubeClient, instance=True, spec_set=True)
        self.unexpected: list[str] = []
        for name in KUBE_METHODS:
            getattr(self.client, name).side_effect = self._forbidden(name)

    def _forbidden(self, name: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            call = f"KubeClient.{name}{args}"
            self.unexpected.append(call)
            raise UnexpectedKubeCallError(f"{call} must not be called")

        return refuse

    def allow(self, *names: str) -> KubeDouble:
        """NAMES may be called; they do nothing and return None."""
        for name in names:
            method = self._method(name)
            method.side_effect = None
            method.return_value = None
        return self

    def answer(self, name: str, side_effect: Callable[..., Any]) -> KubeDouble:
        """NAME may be called; SIDE_EFFECT decides what it does (raise, or return)."""
        self._method(name).side_effect = side_effect
        return self

    def calls(self, name: str) -> list[tuple[Any, ...]]:
        """The positional arguments of each call made to NAME."""
        return [tuple(call.args) for call in self._method(name).call_args_list]

    def assert_only_expected_calls(self) -> None:
        assert not self.unexpected, f"calls the test did not set up: {self.unexpected}"

    def _method(self, name: str) -> Any:
        if name not in KUBE_METHODS:
            raise AttributeError(f"KubeClient has no method {name}")
        return getattr(self.client, name)

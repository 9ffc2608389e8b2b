"""What is left of a watch event's object once the controllers have what they keep."""

from __future__ import annotations

import gc
import weakref
from typing import Any, cast

from kopf._cogs.structs.bodies import Body, RawBody

from aisched.kube.records import release_template, slim_object
from tests.builders import a_training_job


class _Template(dict[str, Any]):
    """A template that a weak reference can follow (a plain dict cannot be)."""


def test_a_handled_events_template_is_freed_though_kopfs_body_still_holds_the_object() -> None:
    raw = a_training_job("big").obj()
    raw["spec"]["template"] = template = _Template(raw["spec"]["template"])
    template_alive = weakref.ref(template)
    del template
    body = Body(cast(RawBody, raw))  # kopf's wrapper: a reference cycle, freed by the cyclic collector only
    gc.disable()  # as after a large parse, when the collector has no reason to run for long
    try:
        release_template(raw)
        assert template_alive() is None
        assert body["spec"]["gpusPerReplica"] == raw["spec"]["gpusPerReplica"]  # the rest is kept
    finally:
        gc.enable()


def test_a_record_made_before_the_release_keeps_the_template() -> None:
    raw = a_training_job("small").obj()
    template = raw["spec"]["template"]
    kept = slim_object(dict(raw))  # a small template is kept as the watch parsed it, shared
    release_template(raw)
    assert "template" not in raw["spec"]
    assert kept["spec"]["template"] is template
    assert kept["spec"] == {**raw["spec"], "template": template}


def test_an_object_without_a_template_is_left_as_it_is() -> None:
    raw: dict[str, Any] = {"metadata": {"name": "q"}, "spec": {"nominalGPUs": 8}}
    release_template(raw)
    assert raw == {"metadata": {"name": "q"}, "spec": {"nominalGPUs": 8}}

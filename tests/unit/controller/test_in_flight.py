"""One record of GPUs promised and not yet written down, shared by the TrainingJob and InferenceService
controllers: a promise counts in every snapshot until it settles, and no decision reads past it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisched.controller.in_flight import InFlightPlacements, Promised, fits, gpus_by_node
from aisched.kube.inventory import Inventory
from aisched.policy.cluster import ClusterSnapshot, local_node
from aisched.policy.placement import Placement
from aisched.policy.shared_room import SharedRoom, SharePart
from aisched.policy.topology import LOCAL_TOPOLOGY, DomainId
from aisched.settings import Settings
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_isolation import one_pass, status_of
from tests.unit.controller.test_training_loop import a_controller, a_job, a_node
from tests.unit.controller.test_training_tenancy import research

NODES = ("n1", "n2", "n3")
owners = st.sampled_from(["train/a", "train/b", "serve/x", "serve/y"])
promises = st.dictionaries(st.sampled_from(NODES), st.integers(min_value=0, max_value=8), max_size=3)


@given(st.lists(st.tuples(owners, st.one_of(st.none(), promises)), max_size=30))
def test_what_is_promised_on_a_node_is_the_sum_of_the_promises_not_settled(
    steps: list[tuple[str, dict[str, int] | None]],
) -> None:
    in_flight, outstanding = InFlightPlacements(), dict[str, dict[str, int]]()
    for owner, promise in steps:
        before = in_flight.version
        if promise is None:
            changed = owner in outstanding
            in_flight.settle(owner)
            outstanding.pop(owner, None)
        else:
            changed = owner in outstanding or any(promise.values())
            in_flight.promise(owner, Promised(promise))
            outstanding.pop(owner, None)
            if any(promise.values()):
                outstanding[owner] = promise
        expected = {n: sum(p.get(n, 0) for p in outstanding.values()) for n in NODES}
        assert in_flight.by_node() == {n: g for n, g in expected.items() if g}
        assert (in_flight.version != before) == changed
    for owner in list(outstanding):
        in_flight.settle(owner)
    assert in_flight.by_node() == {} and len(in_flight) == 0


def test_fits_counts_gpus_a_node_is_named_for_more_than_once() -> None:
    inventory = Inventory(Settings())
    inventory.upsert_node(a_node("n1", 8))
    snapshot = inventory.snapshot()
    assert fits(snapshot, gpus_by_node(["n1", "n1"], 4))
    assert not fits(snapshot, gpus_by_node(["n1", "n1", "n1"], 4))
    assert not fits(snapshot, {"gone": 1})


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_an_admission_whose_gpus_were_promised_elsewhere_during_the_cycle_waits(kube: KubeDouble) -> None:
    """The cycle decides on the snapshot it took at its start; while it writes (here: a refused job's
    condition), the InferenceService controller promises the node's GPUs to a replica. The gang
    the cycle chose that node for is not launched on it: it waits for the next cycle."""
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.queue_seen(research(namespaces=["elsewhere"]))

    taken: list[bool] = []

    async def a_replica_takes_the_node(*_: object) -> None:
        if not taken:  # once, during the first cycle's writes
            controller.in_flight.promise(("InferenceService", ("ns", "svc")), Promised({"n1": 8}))
            taken.append(True)

    kube.allow("post_event", "create").answer("patch_status", a_replica_takes_the_node)
    controller.job_seen(a_job("refused", queue="research", gpusPerReplica=1))
    gang = a_job("gang", gpusPerReplica=8)
    gang["metadata"]["uid"] = "uid-gang"
    controller.job_seen(gang)
    await one_pass(controller)
    assert status_of(controller, "gang").get("phase") != "Placing"
    assert not [obj for (obj,) in kube.calls("create") if obj["metadata"]["name"].startswith("gang")]
    # The replica's pods hold the GPUs now; once they are gone, the gang is admitted.
    controller.in_flight.settle(("InferenceService", ("ns", "svc")))
    await one_pass(controller)
    assert status_of(controller, "gang")["phase"] == "Placing"
    assert len(controller.in_flight) == 0


def test_a_promised_share_takes_its_part_of_a_gpu_and_a_mig_promise_its_instance_not_whole_gpus() -> None:
    mig = local_node("m1", 0, zone="z", rack="r", nvlink_domain="m1")
    snapshot = ClusterSnapshot([local_node("n1", 2, zone="z", rack="r", nvlink_domain="n1")], LOCAL_TOPOLOGY)
    snapshot.shared = SharedRoom({"n1": {"gpu-0": (600, 48_000)}}, {"n1": 80_000}, [mig], {"m1": {"1g.10gb": 2}})
    in_flight = InFlightPlacements()
    domain = DomainId(None, ())
    share = Placement(("n1",), 1, domain, parts=(SharePart("n1", "gpu-0", 400, 32_000, splits=False),))
    in_flight.promise(("InferenceService", ("ns", "half")), Promised.of(share))
    in_flight.promise(("TrainingJob", "ns/mig"), Promised.of(Placement(("m1",), 1, domain, mig_profile="1g.10gb")))
    assert in_flight.by_node() == {}  # no whole GPU: the share joins a GPU shares hold already
    in_flight.hold_shared(snapshot.shared)
    assert snapshot.shared.parts["n1"]["gpu-0"] == (200, 16_000)
    assert snapshot.shared.mig_free["m1"]["1g.10gb"] == 1
    assert snapshot.free_gpus("n1") == 2

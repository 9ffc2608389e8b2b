"""Reading traces and cluster descriptions for the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from aisched.api.common import CapacityType
from aisched.sim.clusters import ClusterDescriptionError, GridSpec, describe_nodes, generated_cluster, load_cluster
from aisched.sim.traces import TraceFormat, TraceJob, detect_format, read_trace
from aisched.testing.nodes import load_description, render_nodes
from tests.levels import NVLINK_DOMAIN, RACK

REPO = Path(__file__).resolve().parents[3]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_philly_rows_become_jobs_of_their_virtual_cluster_from_the_first_arrival(tmp_path: Path) -> None:
    trace = write(
        tmp_path / "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 10:00:00,600.0,8,4800.0,vc1\n"
        "2017-10-01 09:59:00,60.0,1,60.0,vc2\n"
        "2017-10-01 10:05:00,0.0,4,0.0,vc1\n"  # no run time: left out
        "2017-10-01 10:10:00,30.0,16,480.0,vc3\n",
    )
    assert detect_format(trace) == TraceFormat.PHILLY
    jobs = read_trace(trace)
    assert jobs == [
        TraceJob("philly/1", 0.0, 60.0, 1, tenant="vc2"),
        TraceJob("philly/0", 60.0, 600.0, 8, tenant="vc1"),
        TraceJob("philly/3", 660.0, 30.0, 16, tenant="vc3"),
    ]
    assert read_trace(trace, limit=1, skip=1) == [TraceJob("philly/0", 0.0, 600.0, 8, tenant="vc1")]


def test_alibaba_with_times_skips_cpu_pods_and_pods_never_scheduled(tmp_path: Path) -> None:
    trace = write(
        tmp_path / "openb_pod_list_default.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1024,1,460,,LS,Running,100,900,110\n"  # a shared GPU counts as one
        "p1,1000,1024,0,0,,BE,Running,120,300,121\n"  # no GPU
        "p2,1000,1024,8,1000,,LS,Pending,130,5000,\n"  # never ran
        "p3,1000,1024,4,1000,,LS,Running,150,450,160\n",
    )
    assert detect_format(trace) == TraceFormat.ALIBABA
    assert read_trace(trace) == [TraceJob("alibaba/p0", 0.0, 790.0, 1), TraceJob("alibaba/p3", 50.0, 290.0, 4)]


def test_alibaba_without_times_gets_seeded_arrivals_and_durations(tmp_path: Path) -> None:
    rows = "".join(f"p{i},1000,1024,{[1, 2, 4, 8][i % 4]},1000\n" for i in range(400))
    trace = write(tmp_path / "openb_pod_list_multigpu50.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + rows)
    first = read_trace(trace, cluster_gpus=64, load=0.8, seed=3)
    assert first == read_trace(trace, cluster_gpus=64, load=0.8, seed=3)
    assert first != read_trace(trace, cluster_gpus=64, load=0.8, seed=4)
    assert [j.gpus for j in first[:4]] == [1, 2, 4, 8]  # arrival order kept
    offered = sum(j.gpus * j.duration for j in first) / (first[-1].arrival * 64)
    assert 0.4 < offered < 1.6  # near the asked-for load (a heavy-tailed sample of 400)
    with pytest.raises(ValueError, match="cluster's GPU count"):
        read_trace(trace)


def test_unknown_trace_header_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither a Philly"):
        detect_format(write(tmp_path / "x.csv", "a,b\n1,2\n"))


@pytest.mark.parametrize("preset", ["small", "large"])
def test_cluster_descriptions_name_nodes_as_the_local_cluster_does(preset: str) -> None:
    path = REPO / "hack" / "clusters" / f"{preset}.yaml"
    rendered = render_nodes(load_description(path))
    simulated = load_cluster(path)
    assert [n.name for n in simulated] == [n["metadata"]["name"] for n in rendered]
    for node, manifest in zip(simulated, rendered, strict=True):
        labels = manifest["metadata"]["labels"]
        assert node.zone == labels["topology.kubernetes.io/zone"]
        assert node.label(RACK) == labels["aisched.io/rack"]
        assert node.label(NVLINK_DOMAIN) == labels.get("nvidia.com/gpu.clique")
        assert node.gpu_product == labels["nvidia.com/gpu.product"]
        assert node.allocatable_gpus == int(manifest["status"]["allocatable"]["nvidia.com/gpu"])
        spot = labels["karpenter.sh/capacity-type"] == "spot"
        assert node.capacity_type == (CapacityType.SPOT if spot else CapacityType.ON_DEMAND)


def test_a_bad_description_says_where() -> None:
    with pytest.raises(ClusterDescriptionError, match="rack z-r01: unknown node type 'nope'"):
        list(describe_nodes({"nodeTypes": {}, "zones": [{"name": "z", "racks": [{"nodes": [{"type": "nope"}]}]}]}))


def test_generated_grid() -> None:
    nodes = generated_cluster(GridSpec(nodes=10, nodes_per_rack=4, racks_per_zone=2, nodes_per_nvlink=2))
    assert len({n.label(RACK) for n in nodes}) == 3
    assert len({n.zone for n in nodes}) == 2
    assert nodes[0].name == "zone-0-r01-n01"
    assert nodes[0].label(NVLINK_DOMAIN) == nodes[1].label(NVLINK_DOMAIN) != nodes[2].label(NVLINK_DOMAIN)

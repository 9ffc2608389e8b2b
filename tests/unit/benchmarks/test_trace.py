"""benchmarks/trace.py: a tiny run writes every trace's figures where asked; a missing input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import trace

POLICIES = {"aisched", "kueue", "volcano", "tiresias", "fifo_first_fit", "fifo_spread"}


def write_tiny_inputs(directory: Path) -> list[str]:
    philly, alibaba, pollux = directory / "philly.csv", directory / "pods.csv", directory / "workload.csv"
    rows = "".join(f"2017-10-01 10:{i // 60:02d}:{i % 60:02d},{300 + 7 * i}.0,{[1, 2, 8][i % 3]}\n" for i in range(90))
    philly.write_text("timestamp,duration,num_gpus\n" + rows)
    pods = "".join(
        f"p{i},1000,1024,{[1, 2, 4, 8][i % 4]},1000,,LS,Running,{i * 60},{i * 60 + 900},{i * 60}\n" for i in range(30)
    )
    alibaba.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        + pods
    )
    jobs = "".join(f"j{i},{i * 30},{['bert', 'cifar10'][i % 2]},{[1, 2, 4][i % 3]},64\n" for i in range(20))
    pollux.write_text("name,time,application,num_replicas,batch_size\n" + jobs)
    placement = directory / "placement"
    placement.mkdir()
    (placement / "bert.csv").write_text("placement,local_bsz,step_time,sync_time\n2,4,1.0,0.1\n11,4,2.0,0.1\n")
    (placement / "cifar10.csv").write_text("placement,local_bsz,step_time,sync_time\n2,4,1.0,0.1\n11,4,1.1,0.1\n")
    return [
        "--philly", str(philly), "--alibaba", str(alibaba), "--pollux", str(pollux), "--placement", str(placement),
    ]  # fmt: skip


def test_a_tiny_run_writes_every_traces_figures_in_the_output_dir(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert trace.main([*write_tiny_inputs(tmp_path), "--output-dir", str(out)]) == 0
    # 90 Philly jobs in 90 s: no opening ramp to skip.
    for name, jobs in (("philly", 90), ("alibaba", 30), ("pollux", 20)):
        figures = json.loads((out / f"trace_{name}.json").read_text())
        assert figures["jobs"] == jobs
        assert set(figures["policies"]) == POLICIES
        assert figures["options"]["duration_knowledge"] == "none"
        assert "sized" in figures["cluster"]
        assert set(figures["variants"]["elastic_rack_zone_1"]["policies"]) == POLICIES
        assert figures["variants"]["aisched_true_durations"]["options"]["duration_knowledge"] == "truth"
        # Elastic jobs by default; the headline has none, and no rack or zone factor.
        assert figures["options"]["elastic_share"] == trace.DEFAULT_ELASTIC_SHARE
        headline = figures["variants"]["no_elastic"]
        assert headline["options"]["elastic_share"] == 0.0
        assert headline["options"]["rack_factor"] == headline["options"]["zone_factor"] == 1.0
        assert set(headline["policies"]) == POLICIES
        assert headline["policies"]["aisched"]["resizes_per_job"] == 0.0
        peers = {p: f["avg_jct_s"] for p, f in headline["policies"].items() if p != "aisched"}
        best = min(peers, key=lambda p: (peers[p], p))
        assert headline["best_peer"] == best
        assert headline["ratio_vs_best_peer"] == round(headline["policies"]["aisched"]["avg_jct_s"] / peers[best], 4)
        assert figures["headline"]["ratio_vs_best_peer"] == headline["ratio_vs_best_peer"]
        assert figures["variants"]["elastic"]["options"]["elastic_share"] == trace.DEFAULT_ELASTIC_SHARE
        assert figures["knew"]["aisched"]["elasticity"] is True and figures["knew"]["kueue"]["elasticity"] is False
        assert {k["durations"] for k in figures["knew"].values()} == {"none"}
        assert "commit" in figures["provenance"]
        assert figures["variants"]["pessimistic_growth"]["options"]["scaling"]["growth_efficiency"] == 0.25
        for policy in figures["policies"].values():
            assert {"avg_jct_s", "p95_jct_s", "effective_utilization", "in_smallest_domain", "p99_slowdown"} <= set(
                policy
            )


def test_a_missing_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / trace.PLACEMENT).mkdir(parents=True)
    assert trace.main(["--data-dir", str(tmp_path)]) == 2
    missing = tmp_path / trace.PHILLY
    assert capsys.readouterr().err == f"error: {missing}: no such file (set it with --philly or --data-dir)\n"


def test_the_philly_ramp_is_found_in_the_file_or_given(tmp_path: Path) -> None:
    inputs = write_tiny_inputs(tmp_path)
    philly = tmp_path / "ramped.csv"
    trickle = "".join(f"2017-09-{1 + day:02d} 08:00:00,600.0,1\n" for day in range(6))  # one a day for six days
    burst = "".join(f"2017-09-10 {i // 60:02d}:{i % 60:02d}:00,{300 + i}.0,1\n" for i in range(100))
    philly.write_text("timestamp,duration,num_gpus\n" + trickle + burst)
    inputs[inputs.index("--philly") + 1] = str(philly)
    for extra, skipped in (([], 6), (["--philly-skip", "2"], 2)):
        out = tmp_path / f"out-{skipped}"
        argv = [*inputs, "--traces", "philly", "--policies", "aisched,kueue", *extra, "--output-dir", str(out)]
        assert trace.main(argv) == 0
        figures = json.loads((out / "trace_philly.json").read_text())
        assert figures["slice"]["skip"] == skipped
        assert figures["jobs"] == 106 - skipped

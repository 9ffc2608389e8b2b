"""The MIG scenario: accounting of admitted jobs and stranded GPU-hours, and no repartition under a running job."""

from __future__ import annotations

import pytest

from aisched.sim.mig import STRATEGIES, MigJob, mig_jobs, simulate_mig

MODELS = ["H100-80GB", "A100-40GB"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_job_is_admitted_or_refused(strategy: str) -> None:
    jobs = mig_jobs(300, {"1g": 0.5, "3g": 0.3, "7g": 0.2}, gpus=2, load=1.5, mean_duration_h=2.0, seed=4)
    run = simulate_mig(MODELS, jobs, strategy)
    assert run.admitted + run.refused == len(jobs)
    assert run.stranded_gpu_hours >= 0


def test_a_lone_small_job_on_a_whole_gpu_strands_the_rest_of_it() -> None:
    run = simulate_mig(["H100-80GB"], [MigJob(0.0, 7.0, "1g")], "whole_gpu")
    assert run.admitted == 1 and run.stranded_gpu_hours == pytest.approx(6.0)


def test_static_layouts_refuse_profiles_they_do_not_hold() -> None:
    jobs = [MigJob(0.0, 1.0, "7g")]
    assert simulate_mig(["A100-40GB"], jobs, "all_balanced").refused == 1
    assert simulate_mig(["A100-40GB"], jobs, "aisched").admitted == 1


def test_a_busy_gpu_is_never_repartitioned() -> None:
    # The 1g job holds the only GPU (laid out for 1g); the 7g job needs a repartition it cannot get.
    jobs = [MigJob(0.0, 5.0, "1g"), MigJob(1.0, 1.0, "7g"), MigJob(6.0, 1.0, "7g")]
    run = simulate_mig(["H100-80GB"], jobs, "aisched", reconfigure_h=0.0)
    assert (run.admitted, run.refused, run.repartitions) == (2, 1, 2)

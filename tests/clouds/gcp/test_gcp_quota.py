"""check_quota reads regions.get and projects.get quotas (metric, limit, usage)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orch.clouds.base import ProvisionConfig
from orch.clouds.errors import BlockScope, QuotaError
from orch.clouds.gcp import GCPProvider
from orch.clouds.gcp_quota import gpu_metric
from tests.clouds.gcp.conftest import REGION
from tests.fakes.gcp_compute_fake import GCPComputeFake

Config = Callable[..., ProvisionConfig]


def test_enough_quota_passes(fake: GCPComputeFake, provider: GCPProvider,
                             config: Config) -> None:
    provider.check_quota(config(num_nodes=4, instance_type="a2-highgpu-1g"))

    assert ("regions.get", None) in fake.calls()
    assert ("projects.get", None) in fake.calls()


@pytest.mark.parametrize(("metric", "limit", "usage"), [
    ("CPUS", 16, 1),  # 2 x 8 vCPUs do not fit in 15
    ("N2_CPUS", 24, 9),  # the machine family's own quota
    ("IN_USE_ADDRESSES", 1, 0),  # one external IP per node
])
def test_regional_quota_exceeded(fake: GCPComputeFake, provider: GCPProvider, config: Config,
                                 metric: str, limit: int, usage: int) -> None:
    fake.set_quota(REGION, metric, limit, usage)

    with pytest.raises(QuotaError) as raised:
        provider.check_quota(config(num_nodes=2))

    assert raised.value.scope == BlockScope.REGION
    assert f"Quota '{metric}' exceeded" in raised.value.message
    assert fake.calls("instances.insert") == []


def test_exactly_enough_quota_passes(fake: GCPComputeFake, provider: GCPProvider,
                                     config: Config) -> None:
    fake.set_quota(REGION, "CPUS", 16, 0)

    provider.check_quota(config(num_nodes=2))


def test_gpu_quota_of_the_region(fake: GCPComputeFake, provider: GCPProvider,
                                 config: Config) -> None:
    fake.set_quota(REGION, "NVIDIA_L4_GPUS", 1)

    provider.check_quota(config(num_nodes=1, instance_type="g2-standard-4"))
    with pytest.raises(QuotaError) as raised:
        provider.check_quota(config(num_nodes=2, instance_type="g2-standard-4"))
    assert "NVIDIA_L4_GPUS" in raised.value.message
    assert raised.value.scope == BlockScope.REGION


def test_gpus_all_regions_blocks_the_whole_cloud(fake: GCPComputeFake, provider: GCPProvider,
                                                 config: Config) -> None:
    fake.set_quota(None, "GPUS_ALL_REGIONS", 4, usage=3)

    with pytest.raises(QuotaError) as raised:
        provider.check_quota(config(num_nodes=2, instance_type="a2-highgpu-1g"))

    assert raised.value.scope == BlockScope.CLOUD
    assert "GPUS_ALL_REGIONS" in raised.value.message


def test_spot_uses_preemptible_quota_when_granted(fake: GCPComputeFake, provider: GCPProvider,
                                                  config: Config) -> None:
    fake.set_quota(REGION, "CPUS", 0)
    fake.set_quota(REGION, "PREEMPTIBLE_CPUS", 16)
    fake.set_quota(REGION, "PREEMPTIBLE_NVIDIA_A100_GPUS", 1)

    provider.check_quota(config(num_nodes=2, use_spot=True))
    with pytest.raises(QuotaError) as raised:
        provider.check_quota(config(num_nodes=2, use_spot=True, instance_type="a2-highgpu-1g"))
    assert "PREEMPTIBLE_" in raised.value.message


def test_spot_without_preemptible_quota_uses_the_standard_one(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    fake.set_quota(REGION, "CPUS", 8)  # PREEMPTIBLE_CPUS is 0: not granted

    with pytest.raises(QuotaError) as raised:
        provider.check_quota(config(num_nodes=2, use_spot=True))
    assert "'CPUS'" in raised.value.message


def test_unknown_quota_passes(fake: GCPComputeFake, provider: GCPProvider,
                              config: Config) -> None:
    """a3's CPU quota is not listed for the project: nothing limits it."""
    del fake.state.region_quotas[REGION]["A3_CPUS"]
    fake.set_quota(REGION, "CPUS", 10_000)

    provider.check_quota(config(num_nodes=1, instance_type="a3-highgpu-8g"))


def test_running_instances_of_the_cluster_are_not_counted_twice(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    fake.set_quota(REGION, "CPUS", 16)
    provider.run_instances(config(num_nodes=2))  # uses all 16

    provider.check_quota(config(num_nodes=2))  # relaunching the same cluster fits
    with pytest.raises(QuotaError):
        provider.check_quota(config(num_nodes=3))
    with pytest.raises(QuotaError):
        provider.check_quota(config(cluster_name="c2", num_nodes=1))


def test_stopped_instances_free_their_quota(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    fake.set_quota(REGION, "CPUS", 16)
    provider.run_instances(config(num_nodes=2))
    provider.stop_instances(REGION, "c1")
    provider.query_instances(REGION, "c1")  # STOPPING → TERMINATED

    provider.check_quota(config(cluster_name="c2", num_nodes=2))


@pytest.mark.parametrize(("accelerator", "metric"), [
    ("nvidia-tesla-t4", "NVIDIA_T4_GPUS"),
    ("nvidia-tesla-a100", "NVIDIA_A100_GPUS"),
    ("nvidia-a100-80gb", "NVIDIA_A100_80GB_GPUS"),
    ("nvidia-l4", "NVIDIA_L4_GPUS"),
    ("nvidia-h100-80gb", "NVIDIA_H100_GPUS"),
])
def test_gpu_metric_names(accelerator: str, metric: str) -> None:
    assert gpu_metric(accelerator) == metric

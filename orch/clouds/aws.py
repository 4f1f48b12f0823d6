"""The AWS provider: EC2 through boto3.

Endpoints and credentials come from boto3's own chain, so ``AWS_ENDPOINT_URL`` (or the
per-service ``AWS_ENDPOINT_URL_EC2``...) points every client at a private endpoint or a test
double, and the usual variables, files and roles supply credentials (the instance role
only with the config's ``cloud_identity``: see ``aws_credentials``). botocore retries
throttling and server faults itself (standard mode, ``AWS_MAX_ATTEMPTS`` attempts, 3 by
default); what is still failing after that is raised as orch's typed errors.

A cluster lives in one region and one zone. Its instances are found by their tags (see
``aws_instances``), so every method works on a half-made cluster as well as on a whole one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from orch.clouds import aws_network
from orch.clouds.aws_credentials import found, new_session, source
from orch.clouds.aws_errors import CREDENTIAL_CODES, client_error_code, translate, translated
from orch.clouds.aws_images import default_image_id, ssh_user
from orch.clouds.aws_instances import (
    LIVE_STATES,
    STATUS_OF_STATE,
    client_token,
    describe_cluster,
    is_head,
    missing_indices,
    node_tag_specifications,
    state_name,
)
from orch.clouds.aws_quota import vcpu_quota_code
from orch.clouds.base import (
    ClusterInfo,
    InstanceStatus,
    NodeInfo,
    Operation,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.clouds.errors import (
    AuthError,
    BlockScope,
    CapacityError,
    InvalidConfigError,
    ProvisionError,
    QuotaError,
    TransientError,
)
from orch.clouds.tiers import aws_ebs, wants_best_network
from orch.settings import load_settings

logger = logging.getLogger(__name__)

CLOUD = "aws"
_CLIENT_CONFIG = Config(retries={"mode": "standard"}, user_agent_extra="orch")

# What a wait for a status accepts. An instance shutting down is past stopped: it counts.
_ACCEPTED = {
    InstanceStatus.PENDING: {"pending", "running"},
    InstanceStatus.RUNNING: {"running"},
    InstanceStatus.STOPPING: {"stopping", "stopped", "shutting-down"},
    InstanceStatus.STOPPED: {"stopped", "shutting-down"},
    InstanceStatus.TERMINATING: {"shutting-down"},
}
# StateReason codes of instances EC2 took back for want of capacity.
_CAPACITY_REASONS = frozenset({"Server.InsufficientInstanceCapacity",
                               "Server.SpotInstanceTermination"})
_SPOT_OPTIONS = {"MarketType": "spot",
                 "SpotOptions": {"SpotInstanceType": "one-time",
                                 "InstanceInterruptionBehavior": "terminate"}}


def _instance_type_info(ec2: Any, instance_type: str) -> dict[str, Any]:
    info: dict[str, Any] = ec2.describe_instance_types(
        InstanceTypes=[instance_type])["InstanceTypes"][0]
    return info


def _supports_efa(info: dict[str, Any]) -> bool:
    return bool(info.get("NetworkInfo", {}).get("EfaSupported"))


def _architecture(info: dict[str, Any]) -> str:
    supported = info["ProcessorInfo"]["SupportedArchitectures"]
    for preferred in ("x86_64", "arm64"):
        if preferred in supported:
            return preferred
    return str(supported[0])


def _lost(instance: dict[str, Any], zone: str | None) -> ProvisionError:
    """The error for an instance that went away while it should have been coming up."""
    reason = instance.get("StateReason", {})
    code = str(reason.get("Code", ""))
    message = (f"instance {instance['InstanceId']} is {state_name(instance)} instead of running: "
               f"{reason.get('Message', 'no reason given')}")
    if code in _CAPACITY_REASONS:
        return CapacityError(message, code=code,
                             scope=BlockScope.ZONE if zone else BlockScope.REGION)
    return ProvisionError(message, code=code)


class AWSProvider:
    """EC2 instances tagged ``orch-cluster=<name>``; see the module docstring."""

    name = CLOUD

    def __init__(self, *, poll_interval: float = 5.0, wait_timeout: float = 600.0) -> None:
        self.poll_interval = poll_interval
        self.wait_timeout = wait_timeout
        self._session = new_session(load_settings().cloud_identity)
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()  # a botocore session is not thread-safe; its clients are

    def _client(self, service: str, region: str) -> Any:
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                self._clients[key] = self._session.create_client(
                    service, region_name=region, config=_CLIENT_CONFIG)
            return self._clients[key]

    def _ec2(self, region: str) -> Any:
        return self._client("ec2", region)

    # -- quota --------------------------------------------------------------------------
    def check_quota(self, config: ProvisionConfig) -> None:
        """Compare the vCPUs asked for with the region's vCPU quota for the family.

        Only the limit is known here, not the usage (that takes CloudWatch), so this
        catches a quota that is too small for the request; a quota used up by other
        instances still surfaces as VcpuLimitExceeded from RunInstances.
        """
        instance_type = _require_instance_type(config)
        quota_code = vcpu_quota_code(instance_type, config.use_spot)
        if quota_code is None:
            return
        with translated():
            info = _instance_type_info(self._ec2(config.region), instance_type)
        limit = self._quota_value(config.region, quota_code)
        wanted = info["VCpuInfo"]["DefaultVCpus"] * config.num_nodes
        if limit is not None and wanted > limit:
            market = "spot" if config.use_spot else "on-demand"
            raise QuotaError(
                f"{config.num_nodes}x {instance_type} needs {wanted} {market} vCPUs but the "
                f"quota {quota_code} in {config.region} is {limit:g}",
                code="VcpuLimitExceeded")

    def _quota_value(self, region: str, quota_code: str) -> float | None:
        """The quota's value, or None when it cannot be read (unknown quotas pass)."""
        client = self._client("service-quotas", region)
        try:
            quota = client.get_service_quota(ServiceCode="ec2", QuotaCode=quota_code)["Quota"]
        except ClientError as exc:
            if client_error_code(exc) in CREDENTIAL_CODES:
                raise translate(exc) from exc
            logger.info("quota %s in %s is unknown: %s", quota_code, region, exc)
            return None
        except BotoCoreError as exc:
            error = translate(exc)
            if isinstance(error, AuthError):
                raise error from exc
            logger.info("quota %s in %s is unknown: %s", quota_code, region, exc)
            return None
        return float(quota["Value"])

    # -- provisioning -------------------------------------------------------------------
    def run_instances(self, config: ProvisionConfig) -> ProvisionRecord:
        """Resume the cluster's stopped instances, then launch the missing nodes one by one.

        All or nothing: the first node that cannot be launched raises, and what was made
        stays tagged for the caller to terminate.
        """
        instance_type = _require_instance_type(config)
        ec2 = self._ec2(config.region)
        usable = ("pending", "running", "stopped") if config.resume_stopped else (
            "pending", "running")
        with translated(config.zone):
            if config.resume_stopped:
                self._poll(ec2, config.cluster_name, "stopping instances to stop",
                           lambda instances: all(state_name(i) != "stopping" for i in instances))
            existing = describe_cluster(ec2, config.cluster_name, usable)
            if len(existing) > config.num_nodes:
                raise InvalidConfigError(
                    f"cluster {config.cluster_name} has {len(existing)} instances, more than "
                    f"the {config.num_nodes} asked for; tear it down first")
            resumed = [i["InstanceId"] for i in existing if state_name(i) == "stopped"]
            if resumed:
                ec2.start_instances(InstanceIds=resumed)
        zone = config.zone or (existing[0]["Placement"]["AvailabilityZone"] if existing else None)
        created: list[dict[str, Any]] = []
        to_create = missing_indices(existing, config.num_nodes)
        if to_create:
            request = self._launch_request(ec2, config, instance_type)
            for index in to_create:
                if zone and not aws_network.has_subnet(request):
                    with translated(zone):
                        aws_network.place_in_subnet(
                            request, aws_network.default_subnet_id(ec2, zone))
                instance = self._launch_node(ec2, config, request, zone, index)
                # Without a zone EC2 picks one for the head; the other nodes follow it.
                zone = zone or instance["Placement"]["AvailabilityZone"]
                created.append(instance)
        head = next((i for i in existing + created if is_head(i)), None)
        if head is None:
            raise InvalidConfigError(
                f"cluster {config.cluster_name} has {config.num_nodes} instances but no head")
        return ProvisionRecord(
            cloud=CLOUD, cluster_name=config.cluster_name, region=config.region, zone=zone,
            head_instance_id=head["InstanceId"],
            created_instance_ids=[i["InstanceId"] for i in created],
            resumed_instance_ids=resumed)

    def _launch_request(
        self, ec2: Any, config: ProvisionConfig, instance_type: str
    ) -> dict[str, Any]:
        """What every node's RunInstances shares: image, disk, network, key, market."""
        with translated(config.zone):
            info = _instance_type_info(ec2, instance_type)
            image_id = config.image_id or default_image_id(ec2, _architecture(info))
            images = ec2.describe_images(ImageIds=[image_id])["Images"]
            if not images:
                raise InvalidConfigError(f"image {image_id} does not exist in {config.region}",
                                         code="InvalidAMIID.NotFound")
            group = aws_network.ensure_security_group(ec2, config.cluster_name, config.ports)
            request: dict[str, Any] = {
                "ImageId": image_id,
                "InstanceType": instance_type,
                **aws_network.interfaces(group, efa=wants_best_network(config.network_tier)
                                         and _supports_efa(info)),
                "BlockDeviceMappings": [{
                    "DeviceName": images[0]["RootDeviceName"],
                    "Ebs": {"VolumeSize": config.disk_size, "DeleteOnTermination": True,
                            **aws_ebs(config.disk_tier, instance_type, config.disk_size)},
                }],
            }
            if config.ssh_public_key:
                request["KeyName"] = aws_network.ensure_key_pair(
                    ec2, config.cluster_name, config.ssh_public_key)
        if config.use_spot:
            request["InstanceMarketOptions"] = _SPOT_OPTIONS
        return request

    def _launch_node(
        self, ec2: Any, config: ProvisionConfig, shared: dict[str, Any], zone: str | None,
        index: int,
    ) -> dict[str, Any]:
        request = {**shared, "MinCount": 1, "MaxCount": 1,
                   "TagSpecifications": node_tag_specifications(config.cluster_name, index,
                                                                config.labels)}
        token = client_token(config.idempotency_token, config.cluster_name, config.region, index)
        if token:
            request["ClientToken"] = token
        with translated(zone):
            instance: dict[str, Any] = ec2.run_instances(**request)["Instances"][0]
        return instance

    # -- waiting and looking ------------------------------------------------------------
    def _poll(
        self, ec2: Any, cluster_name: str, what: str,
        done: Callable[[list[dict[str, Any]]], bool],
    ) -> list[dict[str, Any]]:
        """Describe the cluster until ``done`` says so; TransientError after the timeout."""
        deadline = time.monotonic() + self.wait_timeout
        while True:
            instances = describe_cluster(ec2, cluster_name, LIVE_STATES)
            if done(instances):
                return instances
            if time.monotonic() >= deadline:
                states = ", ".join(f"{i['InstanceId']}={state_name(i)}" for i in instances)
                raise TransientError(
                    f"waited {self.wait_timeout:g}s for {what} in {cluster_name}: {states}")
            time.sleep(self.poll_interval)

    def check_instances(self, region: str, cluster_name: str, state: InstanceStatus) -> StateCheck:
        with translated():
            instances = describe_cluster(self._ec2(region), cluster_name, LIVE_STATES)
        if state is InstanceStatus.RUNNING:
            if not instances:
                raise ProvisionError(f"cluster {cluster_name} has no instances in {region}")
            for instance in instances:
                if state_name(instance) == "shutting-down":
                    raise _lost(instance, instance["Placement"].get("AvailabilityZone"))
        return StateCheck(
            done=all(state_name(i) in _ACCEPTED[state] for i in instances),
            seen=", ".join(f"{i['InstanceId']}={state_name(i)}" for i in instances))

    def query_instances(self, region: str, cluster_name: str) -> dict[str, InstanceStatus]:
        with translated():
            instances = describe_cluster(self._ec2(region), cluster_name, LIVE_STATES)
        return {i["InstanceId"]: STATUS_OF_STATE[state_name(i)] for i in instances}

    def get_cluster_info(self, region: str, cluster_name: str) -> ClusterInfo:
        """The running instances, head first, with their addresses and sizes."""
        ec2 = self._ec2(region)
        with translated():
            instances = describe_cluster(ec2, cluster_name, ("running",))
            if not instances:
                return ClusterInfo(cloud=CLOUD, region=region)
            types = {t["InstanceType"]: t for t in ec2.describe_instance_types(
                InstanceTypes=sorted({i["InstanceType"] for i in instances}))["InstanceTypes"]}
            images = self._images(ec2, sorted({i["ImageId"] for i in instances}))
        configured = load_settings().ssh_user  # the config's image -> login user
        nodes = [_node_info(i, types[i["InstanceType"]], images.get(i["ImageId"]), configured)
                 for i in instances]
        return ClusterInfo(
            cloud=CLOUD, region=region,
            zone=instances[0]["Placement"].get("AvailabilityZone"),
            instance_type=instances[0]["InstanceType"], nodes=nodes)

    @staticmethod
    def _images(ec2: Any, image_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The images by id; one deregistered since launch is simply absent."""
        try:
            images = ec2.describe_images(ImageIds=image_ids)["Images"]
        except ClientError as exc:
            if not client_error_code(exc).startswith("InvalidAMIID."):
                raise
            return {}
        return {image["ImageId"]: image for image in images}

    # -- stopping and terminating -------------------------------------------------------
    def check_operations(self, region: str, cluster_name: str,
                         operations: list[Operation]) -> StateCheck:
        """EC2's calls start nothing to wait for but the instances' own state changes."""
        return StateCheck(done=True)

    def stop_instances(self, region: str, cluster_name: str, worker_only: bool = False
                       ) -> list[Operation]:
        ec2 = self._ec2(region)
        with translated():
            ids = [i["InstanceId"] for i in describe_cluster(
                ec2, cluster_name, ("pending", "running"), workers_only=worker_only)]
            if ids:
                ec2.stop_instances(InstanceIds=ids)
        return []

    def terminate_instances(
        self, region: str, cluster_name: str, worker_only: bool = False
    ) -> list[Operation]:
        """Terminate by tag; the whole cluster's key pairs go too (only launches use them)."""
        ec2 = self._ec2(region)
        with translated():
            ids = [i["InstanceId"] for i in describe_cluster(
                ec2, cluster_name, ("pending", "running", "stopping", "stopped"),
                workers_only=worker_only)]
            if ids:
                ec2.terminate_instances(InstanceIds=ids)
            if not worker_only:
                aws_network.delete_key_pairs(ec2, cluster_name)
        return []

    # -- ports --------------------------------------------------------------------------
    def open_ports(self, region: str, cluster_name: str, ports: list[str]
                   ) -> list[Operation]:
        with translated():
            aws_network.ensure_security_group(self._ec2(region), cluster_name, ports)
        return []

    def cleanup_ports(self, region: str, cluster_name: str) -> list[Operation]:
        """Delete the cluster's security group once no instance uses it."""
        with translated():
            aws_network.delete_security_group_if_unused(self._ec2(region), cluster_name)
        return []

    # -- credentials --------------------------------------------------------------------
    def credentials_ok(self) -> tuple[bool, str]:
        """Whether the credentials work (STS GetCallerIdentity), who they are, and where
        they came from."""
        region = self._session.get_config_variable("region") or "us-east-1"
        try:
            credentials = found(self._session)
            identity = self._client("sts", region).get_caller_identity()
        except (ClientError, BotoCoreError) as exc:
            return False, str(translate(exc))
        assert credentials is not None  # else the call raised NoCredentialsError
        return True, (f"AWS account {identity['Account']} as {identity['Arn']} "
                      f"({source(self._session, credentials)})")


def _require_instance_type(config: ProvisionConfig) -> str:
    if not config.instance_type:
        raise InvalidConfigError(f"cluster {config.cluster_name}: AWS needs an instance type")
    return config.instance_type


def _node_info(
    instance: dict[str, Any], type_info: dict[str, Any], image: dict[str, Any] | None,
    configured: Mapping[str, str] | None = None,
) -> NodeInfo:
    gpus = {gpu["Name"]: int(gpu["Count"])
            for gpu in type_info.get("GpuInfo", {}).get("Gpus", [])}
    return NodeInfo(
        instance_id=instance["InstanceId"],
        internal_ip=instance["PrivateIpAddress"],
        external_ip=instance.get("PublicIpAddress"),
        is_head=is_head(instance),
        runner="ssh",
        ssh_user=ssh_user(image, instance.get("ImageId"), configured),
        cpus=float(type_info["VCpuInfo"]["DefaultVCpus"]),
        memory_gb=type_info["MemoryInfo"]["SizeInMiB"] / 1024,
        gpus=gpus,
    )

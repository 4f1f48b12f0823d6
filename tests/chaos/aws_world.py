"""AWS as a chaos lane sees it: moto's EC2 behind the fault front, under a latency profile,
with every instance in the home region a real SSH host (the AWS twin).

* The worker reaches EC2 at the front (:mod:`tests.fakes.ec2_fault_front`), which keeps
  instances ``pending``, ``stopping`` and ``shutting-down`` for :data:`LATENCY` seconds (a
  real cloud's 20-90 s, scaled down so a campaign stays affordable; still long enough that
  a kill lands inside a wait) and makes a region fail on demand (:meth:`fail_region`: no
  capacity in any of its zones, the first RunInstances of each zone excepted when asked,
  so a head is made there and must be removed).
* The twin (:mod:`tests.fakes.twin_hosts`) gives each running instance of the run's
  cluster in :data:`HOME_REGION` a machine; every AWS story ends there. An instance in
  another region never gets that far (its attempt fails before SSH).
* What is on the cloud is read from moto itself, past the front, in every region of
  :data:`REGIONS`: instances that are not terminated, and every security group, key pair
  and volume, by orch's ``orch-cluster`` tag. Only what the lane's current control plane
  made counts (its names on cloud end with its hash, see :mod:`orch.names`): a lane that
  moved to a new ORCH_HOME after a failed run does not report that run's leaks again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from orch.clouds.base import TAG_CLUSTER
from orch.names import control_plane_hash
from tests.chaos.stories import Scene
from tests.e2e.conftest import Orch
from tests.fakes.ec2_fault_front import EC2FaultFront
from tests.fakes.twin_hosts import Image, TwinWatcher, unavailable_reason

HOME_REGION = "us-east-1"  # where the twin runs machines, and every AWS story ends
OTHER_REGION = "us-east-2"
REGIONS = (OTHER_REGION, HOME_REGION)
INSTANCE_TYPE = "m6id.large"  # sold in both regions by orch's catalog, known to moto
LATENCY = {"pending": 5.0, "stopping": 5.0, "shutting-down": 5.0}  # as the latency tests
GONE_STATES = {"terminated", "shutting-down"}  # moto moves at once: shutting-down is rare


class AwsWorld:
    """One moto server and fault front for a lane (or the ones given: the suite's)."""

    cloud = "aws"

    def __init__(self, directory: Path, front: EC2FaultFront | None = None,
                 moto_url: str | None = None):
        self.directory = directory
        self._server: ThreadedMotoServer | None = None
        if front is None or moto_url is None:
            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._server.start()
            host, port = self._server.get_host_and_port()
            moto_url = f"http://{host}:{port}"
            front = EC2FaultFront(moto_url).start()
        self.front, self.moto_url = front, moto_url
        self._clients: dict[str, Any] = {}

    @staticmethod
    def unavailable() -> str | None:
        return unavailable_reason()

    def close(self) -> None:
        if self._server is not None:
            self.front.stop()
            self._server.stop()

    def ec2(self, region: str) -> Any:
        """EC2 straight from moto, past the front: the ground truth."""
        if region not in self._clients:
            self._clients[region] = boto3.session.Session().client(
                "ec2", region_name=region, endpoint_url=self.moto_url,
                aws_access_key_id="testing", aws_secret_access_key="testing")
        return self._clients[region]

    def env(self) -> dict[str, str]:
        """Fake credentials and the front as the endpoint, through boto3's usual variables
        only (no config file, no instance metadata); nodes reached at their private IPs."""
        home = self.directory
        return {"AWS_ENDPOINT_URL": self.front.url, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": HOME_REGION,
                "AWS_CONFIG_FILE": str(home / "no-aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
                "AWS_EC2_METADATA_DISABLED": "true", "ORCH_SSH_USE_INTERNAL_IPS": "1"}

    # -- arranging the cloud ------------------------------------------------------------
    def normal(self) -> None:
        """Every region has capacity again; the latency profile stays."""
        self.front.reset()
        self.front.set_latency(LATENCY)

    def fail_region(self, region: str, *, heads_launch: bool) -> None:
        """No capacity in any zone of ``region``; ``heads_launch``: the first RunInstances of
        each zone (a cluster's head) goes through, the next (its worker) fails."""
        zones = self.ec2(region).describe_availability_zones()["AvailabilityZones"]
        for zone in zones:
            self.front.fail("RunInstances", "InsufficientInstanceCapacity",
                            zone=zone["ZoneName"], skip=1 if heads_launch else 0)

    @contextmanager
    def around(self, scene: Scene) -> Iterator[None]:
        """The run's twin (its cluster's machines in the home region) and a normal cloud."""
        self.normal()
        image = Image.for_other_users()
        assert image is not None, "the twin's image is unavailable"
        twin = TwinWatcher(self.ec2(HOME_REGION), scene.cloud_name,
                           self.directory / "machines" / scene.name, image)
        with twin:
            yield
        self.normal()
        assert not twin.errors, f"the AWS twin failed: {twin.errors[:3]}"

    # -- reading the cloud --------------------------------------------------------------
    def _tagged(self, cli: Orch, region: str) -> list[tuple[str, str]]:
        """(cluster tag, what) of everything the control plane of ``cli`` tagged in
        ``region`` that exists."""
        ec2 = self.ec2(region)
        tagged = [{"Name": "tag-key", "Values": [TAG_CLUSTER]}]
        found = [(_tag(i), f"instance {region}/{i['InstanceId']} {i['State']['Name']}")
                 for r in ec2.describe_instances(Filters=tagged)["Reservations"]
                 for i in r["Instances"] if i["State"]["Name"] not in GONE_STATES]
        found += [(_tag(g), f"security group {region}/{g['GroupId']}")
                  for g in ec2.describe_security_groups(Filters=tagged)["SecurityGroups"]]
        found += [(_tag(k), f"key pair {region}/{k['KeyName']}")
                  for k in ec2.describe_key_pairs(Filters=tagged)["KeyPairs"]]
        found += [(_tag(v), f"volume {region}/{v['VolumeId']}")
                  for v in ec2.describe_volumes(Filters=tagged)["Volumes"]]
        return [(tag, what) for tag, what in found if _made_by(cli, tag)]

    def nodes(self, cli: Orch) -> dict[str, list[str]]:
        """Name on cloud -> its instances that are not gone, in every region."""
        found: dict[str, list[str]] = {}
        for region in REGIONS:
            reservations = self.ec2(region).describe_instances(Filters=[
                {"Name": "tag-key", "Values": [TAG_CLUSTER]}])["Reservations"]
            for instance in (i for r in reservations for i in r["Instances"]):
                if instance["State"]["Name"] not in GONE_STATES and _made_by(cli, _tag(instance)):
                    found.setdefault(_tag(instance), []).append(
                        f"{region}/{instance['InstanceId']}")
        return found

    def instances_in(self, region: str, cloud_name: str) -> dict[str, str]:
        """Instance id -> state of the cluster's instances in ``region`` that are not gone."""
        reservations = self.ec2(region).describe_instances(Filters=[
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [cloud_name]}])["Reservations"]
        return {i["InstanceId"]: i["State"]["Name"] for r in reservations
                for i in r["Instances"] if i["State"]["Name"] not in GONE_STATES}

    def left_of(self, cli: Orch, cloud_name: str) -> list[str]:
        return [what for region in REGIONS for tag, what in self._tagged(cli, region)
                if tag == cloud_name]

    def leaks(self, cli: Orch, known: set[str]) -> list[str]:
        return [f"{what} of {tag}" for region in REGIONS
                for tag, what in self._tagged(cli, region) if tag not in known]


def _made_by(cli: Orch, cloud_name: str) -> bool:
    return cloud_name.endswith("-" + control_plane_hash(cli.home, "embedded", cli.env))


def _tag(resource: dict[str, Any]) -> str:
    return next(t["Value"] for t in resource.get("Tags", []) if t["Key"] == TAG_CLUSTER)

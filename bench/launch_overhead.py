"""What Temporal orchestration adds to a launch on the local cloud.

Baseline: the same steps called directly as library functions (provision a sandbox, start
Ray, submit a one-line job, wait for it, terminate). Measured: `Client.launch` + `logs` +
`down` through the embedded control plane. Both in the same run, alternating, on a
throwaway ORCH_HOME; prints medians and their ratio. Not a test: nothing is asserted.

    .venv/bin/python bench/launch_overhead.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 3


def baseline(name: str) -> float:
    from orch.clouds.base import ProvisionConfig
    from orch.clouds.local import LocalProvider
    from orch.runtime.runner import runner_for

    started = time.perf_counter()
    provider = LocalProvider()
    provider.run_instances(ProvisionConfig(cluster_name=name, num_nodes=1, region="local"))
    head = provider.get_cluster_info("local", name).nodes[0]
    python = head.python
    with runner_for(head) as runner:
        out = runner.check(f"{python} -m orch.runtime.ray_node start --ip {head.internal_ip} "
                           f"--cpus 1").tail
        gcs = json.loads(out.splitlines()[-1])["gcs_address"]
        spec = {"id": 1, "run": "echo hi", "cluster_ips": [head.internal_ip],
                "cluster_name": name, "gcs_address": gcs}
        Path(head.home or "", "spec.json").write_text(json.dumps(spec))
        runner.check(f"{python} -m orch.runtime.jobs submit ~/spec.json")
        runner.check(f"{python} -m orch.runtime.jobs logs 1 --follow")
    provider.terminate_instances("local", name)
    return time.perf_counter() - started


async def through_orch(name: str) -> float:
    from orch.client import Client
    from orch.spec import Task

    async with await Client.connect() as client:
        started = time.perf_counter()
        result = await client.launch(Task(run="echo hi"), name)
        assert result.job_id is not None
        await client.logs(name, result.job_id, on_line=lambda line: None)
        await client.down(name)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as home:
        os.environ["ORCH_HOME"] = home
        from orch.server import ControlPlane

        plane = ControlPlane(Path(home))
        plane.ensure()
        try:
            direct, orchestrated = [], []
            for i in range(args.rounds):
                direct.append(baseline(f"base{i}"))
                orchestrated.append(asyncio.run(through_orch(f"orch{i}")))
                print(f"round {i + 1}: direct {direct[-1]:.1f} s, orch {orchestrated[-1]:.1f} s",
                      file=sys.stderr)
        finally:
            plane.stop()
    d, o = statistics.median(direct), statistics.median(orchestrated)
    print(f"launch+job+down on 1 local node, median of {args.rounds}: direct {d:.1f} s, "
          f"through orch {o:.1f} s, ratio {o / d:.2f}x, overhead {o - d:+.1f} s")


if __name__ == "__main__":
    main()

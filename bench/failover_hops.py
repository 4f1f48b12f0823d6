"""What one failover hop costs beyond the cloud's own error latency, on the simulated cloud.

Ten candidates (ten regions of one zone each, tried in order). A launch where the first
nine answer RunInstances with InsufficientInstanceCapacity (after its latency, as a cloud
does) and the tenth provisions, against a launch where the first provisions, alternating,
``--rounds`` times each, through the client and the embedded control plane. For each
launch, its overhead is its wall time less what the simulated cloud made it wait (every
call's latency, the boot) and less the time its commands ran on the node; the cost of a
hop beyond the error latency is the median overhead with nine failed hops less the median
without, divided by nine. Nothing asserted; the last line is JSON. As root, from the
repository root:

    .venv/bin/python -m bench.failover_hops [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.launch_overhead import BOOT_S, LATENCY_S, simulated_seconds
from bench.sim_cloud import SimCloud, control_plane, exit_on_sigterm, load_average, regions
from orch.clouds.simulated import SimZone
from orch.clouds.simulated_node import node_seconds
from orch.spec import Task

CANDIDATES = 10
FAILING = 9


async def launch_once(cloud: SimCloud, name: str) -> tuple[float, int]:
    """(overhead in seconds, RunInstances calls) of one launch, torn down after."""
    from orch.client import Client

    async with await Client.connect() as client:
        provider = cloud.provider()
        done_before = len(provider.calls())
        started = time.perf_counter()
        await client.launch(Task(run="echo hi"), name)
        wall = time.perf_counter() - started
        calls = provider.calls()[done_before:]
        on_node = sum(node_seconds(provider.node_home(ip)) for cluster, _, ip
                      in provider.clusters() if cluster.startswith(f"{name}-"))
        await client.down(name)
    runs = sum(1 for _, method, _, _ in calls if method == "run_instances")
    return wall - simulated_seconds(calls, BOOT_S) - on_node, runs


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    load_before = load_average()
    healthy = regions(CANDIDATES)
    failing = {name: region.model_copy(update={"zones": {z: SimZone(capacity=0)
                                                         for z in region.zones}})
               if i < FAILING else region for i, (name, region) in enumerate(healthy.items())}
    hops, direct = [], []
    with tempfile.TemporaryDirectory(prefix="orch-bench-hops-") as directory:
        root = Path(directory)
        with SimCloud(root / "cloud", healthy, latency_s=LATENCY_S, boot_s=BOOT_S) as cloud, \
                control_plane(root / "home"):
            for i in range(args.rounds):
                cloud.configure(failing)
                overhead, runs = asyncio.run(launch_once(cloud, f"hops{i}"))
                assert runs == FAILING + 1, f"{runs} RunInstances, not {FAILING + 1}"
                hops.append(overhead)
                cloud.configure(healthy)
                direct.append(asyncio.run(launch_once(cloud, f"direct{i}"))[0])
                print(f"  round {i + 1}: overhead {hops[-1]:.2f} s with {FAILING} failed hops, "
                      f"{direct[-1]:.2f} s without", flush=True)
    per_hop = (statistics.median(hops) - statistics.median(direct)) / FAILING
    figures: dict[str, Any] = {
        "candidates": CANDIDATES, "failing": FAILING, "rounds": args.rounds,
        "overhead_with_hops_s": round(statistics.median(hops), 3),
        "overhead_without_s": round(statistics.median(direct), 3),
        "per_hop_overhead_s": round(per_hop, 3),
        "machine": {"cpus": os.cpu_count(), "load_before": load_before,
                    "load_after": load_average()}}
    print(f"per failover hop, beyond the simulated error latency: {per_hop:.3f} s "
          f"(median overhead {figures['overhead_with_hops_s']} s with {FAILING} failed hops, "
          f"{figures['overhead_without_s']} s without)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""What orch's control plane adds to a launch, two ways, in one run.

1. Local cloud, against Ray itself: ``orch launch -y -c NAME 'echo hi'`` then
   ``orch down -y NAME`` (the CLI, through the embedded control plane) against the raw
   ``ray start --head`` + ``ray job submit -- echo hi`` + stopping that Ray, alternating,
   ``--local-rounds`` times each; prints the medians and their ratio. (Ray is stopped by
   ending its ``ray start --block``, which stops what it started: ``ray stop`` would stop
   every Ray of this user on the machine, other people's included.)
2. Simulated cloud with fixed latencies (``LATENCY_S``, ``BOOT_S``): ``--sim-launches``
   launches of a one-line task through the client, one at a time; for each, the simulated
   time is what the cloud made it wait (every call's latency, the boot; the describes
   that polled during the boot count only once) plus the time its commands ran on the
   node; the control-plane overhead is the launch's wall time minus that. Prints p50/p95.
   Boots last ``BOOT_S`` plus up to ``BOOT_SPREAD_S`` (each instance its own, see
   ``SimConfig.boot_of``), so that the launches sample every phase of the waiter's
   polls against the boot rather than one.

Not a test: nothing is asserted. The last line is one JSON object. From the repository
root, as root (the simulated cloud starts an sshd):

    .venv/bin/python -m bench.launch_overhead [--local-rounds 3] [--sim-launches 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.sim_cloud import SimCloud, control_plane, exit_on_sigterm, load_average, regions
from bench.sim_figures import percentile
from orch.clouds.simulated import instance_name
from orch.clouds.simulated_node import node_seconds
from orch.spec import Task
from tests.fakes.sshd import free_port

LATENCY_S = {"check_quota": 0.2, "run_instances": 1.0, "check_instances": 0.2,
             "get_cluster_info": 0.2, "query_instances": 0.2, "terminate_instances": 1.0,
             "default": 0.2}
BOOT_S = 5.0
BOOT_SPREAD_S = 1.0  # wider than the waiter's gap between polls near the end of a 5 s boot
_BIN = Path(sys.executable).parent


def _timed(args: list[str], **kwargs: Any) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, **kwargs)
    return time.perf_counter() - started


def raw_ray(directory: Path) -> float:
    """ray start --head, ray job submit, stop: seconds."""
    ports = {flag: free_port() for flag in (
        "port", "dashboard-port", "ray-client-server-port", "dashboard-agent-listen-port",
        "metrics-export-port", "runtime-env-agent-port", "dashboard-agent-grpc-port")}
    temp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    started = time.perf_counter()
    ray = subprocess.Popen(
        [str(_BIN / "ray"), "start", "--head", "--block", "--num-cpus=1",
         "--node-ip-address=127.0.0.1", "--include-dashboard=true",
         "--dashboard-host=127.0.0.1", f"--temp-dir={temp}", "--disable-usage-stats",
         *(f"--{flag}={port}" for flag, port in ports.items())],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        address = f"http://127.0.0.1:{ports['dashboard-port']}"
        while True:  # ray job submit needs the dashboard up
            done = subprocess.run([str(_BIN / "ray"), "job", "submit", f"--address={address}",
                                   "--", "echo", "hi"], env=env, capture_output=True)
            if done.returncode == 0:
                break
            if ray.poll() is not None or time.perf_counter() - started > 300:
                raise RuntimeError(f"ray job submit failed: {done.stderr.decode()[-500:]}")
            time.sleep(0.2)
    finally:
        ray.send_signal(signal.SIGTERM)
        ray.wait(timeout=120)
    return time.perf_counter() - started


def through_orch(name: str) -> float:
    orch = str(_BIN / "orch")
    return _timed([orch, "launch", "-y", "-c", name, "echo hi"]) + _timed(
        [orch, "down", "-y", name])


def local_rounds(rounds: int, home: Path) -> dict[str, Any]:
    direct, orchestrated = [], []
    with control_plane(home):
        for i in range(rounds):
            direct.append(raw_ray(home))
            orchestrated.append(through_orch(f"round{i}"))
            print(f"  round {i + 1}: raw Ray {direct[-1]:.1f} s, orch {orchestrated[-1]:.1f} s",
                  flush=True)
    d, o = statistics.median(direct), statistics.median(orchestrated)
    return {"raw_ray_s": round(d, 2), "orch_s": round(o, 2), "ratio": round(o / d, 3)}


def simulated_seconds(calls: list[tuple[float, str, str, float]], boot_s: float) -> float:
    """What the cloud made one launch wait: each call's latency, the describes polling
    for RUNNING counted as one, and the boot."""
    paid = [latency for _, method, _, latency in calls if method != "check_instances"]
    checks = [latency for _, method, _, latency in calls if method == "check_instances"]
    return sum(paid) + (max(checks) if checks else 0.0) + boot_s


async def sim_launches(count: int, cloud: SimCloud) -> list[float]:
    from orch.client import Client

    overheads = []
    async with await Client.connect() as client:
        for i in range(count):
            name = f"l{i}"
            done_before = len(cloud.provider().calls())
            started = time.perf_counter()
            await client.launch(Task(run="echo hi"), name)
            wall = time.perf_counter() - started
            provider = cloud.provider()
            calls = provider.calls()[done_before:]
            on_node = sum(node_seconds(provider.node_home(ip)) for cluster, _, ip
                          in provider.clusters() if cluster.startswith(f"{name}-"))
            boot = provider.config.boot_of(instance_name(calls[0][2], 0))  # its one node
            overheads.append(wall - simulated_seconds(calls, boot) - on_node)
            await client.down(name)
    return overheads


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rounds", type=int, default=3)
    parser.add_argument("--sim-launches", type=int, default=50)
    args = parser.parse_args()
    load_before = load_average()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="orch-bench-launch-") as directory:
        root = Path(directory)
        if args.local_rounds:
            print("local cloud: orch launch + down against raw Ray", flush=True)
            figures["local"] = local_rounds(args.local_rounds, root / "local-home")
            local = figures["local"]
            print(f"  median: raw Ray {local['raw_ray_s']} s, orch {local['orch_s']} s, "
                  f"ratio {local['ratio']}x", flush=True)
        if args.sim_launches:
            with SimCloud(root / "cloud", regions(1), latency_s=LATENCY_S, boot_s=BOOT_S,
                          boot_spread_s=BOOT_SPREAD_S) as cloud, \
                    control_plane(root / "sim-home"):
                overheads = asyncio.run(sim_launches(args.sim_launches, cloud))
            figures["simulated"] = {
                "launches": len(overheads),
                "overhead_p50_s": round(percentile(overheads, 50), 3),
                "overhead_p95_s": round(percentile(overheads, 95), 3)}
            sim = figures["simulated"]
            print(f"simulated cloud, {sim['launches']} launches: control-plane overhead "
                  f"p50 {sim['overhead_p50_s']} s, p95 {sim['overhead_p95_s']} s")
    figures["machine"] = {"cpus": os.cpu_count(), "load_before": load_before,
                          "load_after": load_average()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

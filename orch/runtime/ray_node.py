"""Start and stop Ray on the node this runs on (``python -m orch.runtime.ray_node``).

Run on a node through a command runner. On the local cloud each node gets ports of its
own (so several clusters share one machine) and a Ray temp dir of its own (removed with it).

Crash-safe: ``start`` first writes what it is about to start, the intent
(:mod:`orch.runtime.ray_intent`: head or worker, address, GCS address, temp dir, ports, its
own pid, the time), then runs ``ray start``, then marks the intent started. Each attempt
begins by reading the intent an earlier one left:

* started, for the same role and address, and its raylet alive: reused as it is (a retry
  after a start that succeeded but whose answer was lost, or a relaunch of an UP cluster);
* anything else (not started: a start that failed, timed out or was cut short, whose GCS
  may be up without its raylet; started but dead; another head's worker): its processes are
  stopped, found from the intent rather than by ``ray stop``, and a fresh start follows.

A start that was cut short is never reused even if its raylet came up: ``ray start`` may
have died between the raylet and the daemons it starts after it. A failed or timed-out
``ray start`` is cleaned up at once, so the node is left as it was; the next attempt's
clean-up covers a ``ray_node`` killed outright. So a node never runs two heads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from orch.runtime.local_processes import kill_marked
from orch.runtime.procfs import command_line, process_table, start_time
from orch.runtime.ray_intent import (
    RayIntent,
    forget_intent,
    read_intent,
    record_intent,
    stop_intent,
)
from orch.runtime.runner import LOCAL_NODE_MARKER

DEFAULT_GCS_PORT = 6380  # not Ray's 6379, so a user's own Ray on the node is not disturbed
# Below the 300 s the start_ray activity gives the command, so a slow start is cleaned up
# here rather than killed from outside.
RAY_START_TIMEOUT_S = 240.0
# Ports ray start takes on a local node, where several nodes share one machine.
_LOCAL_PORT_FLAGS = ("ray-client-server-port", "dashboard-agent-listen-port",
                     "metrics-export-port", "runtime-env-agent-port")


def local_ray_temp_dir(home: str) -> str:
    """Short, since Ray's unix socket paths live under it (at most 107 bytes)."""
    return f"/tmp/orch-ray/{hashlib.sha1(home.encode()).hexdigest()[:12]}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _raylet_gcs_addresses(ip: str) -> set[str]:
    """GCS addresses of the raylets alive on this machine for node address ``ip``."""
    found: set[str] = set()
    for pid in process_table():
        args = command_line(pid)
        if args and args[0].endswith("/raylet") and f"--node_ip_address={ip}" in args:
            found.update(a.split("=", 1)[1] for a in args if a.startswith("--gcs-address="))
    return found


def _ray_binary() -> str:
    return str(Path(sys.executable).parent / "ray")


def _reusable(intent: RayIntent, ip: str, head_address: str | None) -> bool:
    """Whether ``intent`` is a completed start of what is asked, still running."""
    if not intent.started or intent.ip != ip or intent.gcs_address is None:
        return False
    if head_address is None:
        same = intent.head is not False
    else:
        same = intent.head is not True and intent.gcs_address == head_address
    return same and healthy(ip, intent.gcs_address)


def _new_intent(ip: str, head_address: str | None, local: str | None) -> RayIntent:
    ports: dict[str, int] = {}
    if head_address is None:
        ports["port"] = _free_port() if local else DEFAULT_GCS_PORT
        gcs_address = f"{ip}:{ports['port']}"
    else:
        gcs_address = head_address
    if local:
        ports.update({flag: _free_port() for flag in _LOCAL_PORT_FLAGS})
    return RayIntent(gcs_address=gcs_address, ip=ip, head=head_address is None,
                     temp_dir=local_ray_temp_dir(local) if local else None, ports=ports,
                     pid=os.getpid(), pid_start_time=start_time(os.getpid()),
                     recorded_at=time.time(), local_node=local, started=False)


def _ray_start(intent: RayIntent, cpus: int, gpus: int) -> subprocess.CompletedProcess[str]:
    args = [_ray_binary(), "start", f"--node-ip-address={intent.ip}", f"--num-cpus={cpus}",
            f"--num-gpus={gpus}", "--disable-usage-stats"]
    if intent.head:
        args += ["--head", "--include-dashboard=false"]
    else:
        args += [f"--address={intent.gcs_address}"]
    if intent.temp_dir:
        args += [f"--temp-dir={intent.temp_dir}"]
    args += [f"--{flag}={port}" for flag, port in intent.ports.items()]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        return subprocess.run(args, env=env, capture_output=True, text=True,
                              timeout=RAY_START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            args, -1, "", f"ray start did not end in {RAY_START_TIMEOUT_S:.0f} s\n")


def start(ip: str, cpus: int, head_address: str | None, gpus: int) -> str:
    """Start the head (``head_address`` None) or a worker; return the GCS address. See the
    module docstring for what an attempt does with what an earlier one left."""
    local = os.environ.get(LOCAL_NODE_MARKER)
    previous = read_intent()
    if previous is not None and _reusable(previous, ip, head_address):
        return str(previous.gcs_address)
    if previous is None and local:  # no file, yet the node's temp dir may have processes
        previous = RayIntent(ip=ip, temp_dir=local_ray_temp_dir(local), local_node=local)
    if previous is not None:
        stop_intent(previous)
    intent = _new_intent(ip, head_address, local)
    record_intent(intent)
    result = _ray_start(intent, cpus, gpus)
    if result.returncode != 0:
        stop_intent(intent)  # what it left (a GCS without its raylet...): the node as it was
        forget_intent()
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"ray start failed with exit code {result.returncode}")
    record_intent(intent.model_copy(update={"started": True}))
    return str(intent.gcs_address)


def stop() -> None:
    """Stop Ray on this node: what the intent names (which ``ray stop`` may not see), then
    on a local node every process of the node, elsewhere ``ray stop``."""
    local = os.environ.get(LOCAL_NODE_MARKER)
    intent = read_intent()
    if intent is not None:
        stop_intent(intent)
    if local:
        kill_marked(local)
        shutil.rmtree(local_ray_temp_dir(local), ignore_errors=True)
    else:
        subprocess.run([_ray_binary(), "stop", "--force"], capture_output=True)
    forget_intent()


def healthy(ip: str, gcs_address: str) -> bool:
    """Whether this node's raylet for the cluster whose GCS is ``gcs_address`` is alive."""
    return gcs_address in _raylet_gcs_addresses(ip)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="orch-ray-node")
    sub = parser.add_subparsers(dest="command", required=True)
    start_parser = sub.add_parser("start")
    start_parser.add_argument("--ip", required=True)
    start_parser.add_argument("--cpus", type=int, required=True)
    start_parser.add_argument("--gpus", type=int, default=0)
    start_parser.add_argument("--head-address")
    sub.add_parser("stop")
    health = sub.add_parser("health")
    health.add_argument("--ip", required=True)
    health.add_argument("--gcs-address", required=True)
    args = parser.parse_args(argv)
    if args.command == "start":
        print(json.dumps({"gcs_address": start(args.ip, args.cpus, args.head_address, args.gpus)}))
    elif args.command == "health":
        raise SystemExit(0 if healthy(args.ip, args.gcs_address) else 1)
    else:
        stop()


if __name__ == "__main__":
    main()

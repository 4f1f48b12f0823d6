"""Start and stop Ray on the node this runs on (``python -m orch.runtime.ray_node``).

Run on a node through a command runner. Idempotent: a node whose raylet for the same
cluster is alive is left alone. On the local cloud each node gets ports of its own (so
several clusters share one machine) and a Ray temp dir of its own (removed with it).
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
from pathlib import Path

from orch.runtime.local_processes import kill_marked
from orch.runtime.runner import LOCAL_NODE_MARKER

DEFAULT_GCS_PORT = 6380  # not Ray's 6379, so a user's own Ray on the node is not disturbed
STATE_FILE = Path("~/.orch-node/ray.json").expanduser()


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
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not args or not args[0].endswith(b"/raylet"):
            continue
        text = [a.decode(errors="replace") for a in args]
        if f"--node_ip_address={ip}" in text:
            found.update(a.split("=", 1)[1] for a in text if a.startswith("--gcs-address="))
    return found


def _ray_binary() -> str:
    return str(Path(sys.executable).parent / "ray")


def start(ip: str, cpus: int, head_address: str | None, gpus: int) -> str:
    """Start the head (``head_address`` None) or a worker; return the GCS address."""
    local = os.environ.get(LOCAL_NODE_MARKER)
    if STATE_FILE.exists():
        state = json.loads(STATE_FILE.read_text())
        wanted = head_address or state.get("gcs_address")
        if wanted and wanted in _raylet_gcs_addresses(ip):
            return str(wanted)
    args = [_ray_binary(), "start", f"--node-ip-address={ip}", f"--num-cpus={cpus}",
            f"--num-gpus={gpus}", "--disable-usage-stats"]
    if head_address is None:
        port = _free_port() if local else DEFAULT_GCS_PORT
        gcs_address = f"{ip}:{port}"
        args += ["--head", f"--port={port}", "--include-dashboard=false"]
    else:
        gcs_address = head_address
        args += [f"--address={head_address}"]
    if local:
        args += [
            f"--temp-dir={local_ray_temp_dir(local)}",
            f"--ray-client-server-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}",
            f"--metrics-export-port={_free_port()}",
            f"--runtime-env-agent-port={_free_port()}",
        ]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    result = subprocess.run(args, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"ray start failed with exit code {result.returncode}")
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps({"gcs_address": gcs_address, "ip": ip}))
    return gcs_address


def stop() -> None:
    """Stop Ray on this node. A local node kills only its own processes."""
    local = os.environ.get(LOCAL_NODE_MARKER)
    if local:
        kill_marked(local)
        shutil.rmtree(local_ray_temp_dir(local), ignore_errors=True)
    else:
        subprocess.run([_ray_binary(), "stop", "--force"], capture_output=True)
    STATE_FILE.unlink(missing_ok=True)


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

"""The Ray driver of one job (``python -m orch.runtime.driver <job dir>``), on the head.

It gang-schedules one bundle per node (a STRICT_SPREAD placement group, so the job starts
on all nodes or waits as PENDING), runs the task's command on every node with its rank
and the cluster's addresses in the environment, and streams every node's output back in
order into the job's log (its own stdout). SIGTERM kills the user's command on every node
before the driver exits.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from orch.runtime import jobs
from orch.runtime.job_records import JobSpec
from orch.secret import clear_values
from orch.status import JobStatus

READ_WAIT_S = 0.5
HEAD_PIN = 0.001  # of the head's node:<ip> resource (1.0 per node): any number of jobs fit


def node_environment(spec: JobSpec, node_ips: list[str], rank: int) -> dict[str, str]:
    ips = "\n".join(node_ips)
    return {
        **spec.envs,
        **clear_values(spec.secrets),
        "ORCH_NODE_RANK": str(rank),
        "ORCH_NODE_IPS": ips,
        "ORCH_NUM_NODES": str(spec.num_nodes),
        "ORCH_CLUSTER_NAME": spec.cluster_name,
        "ORCH_JOB_ID": str(spec.id),
        "SKYPILOT_NODE_RANK": str(rank),
        "SKYPILOT_NODE_IPS": ips,
        "SKYPILOT_NUM_NODES": str(spec.num_nodes),
    }


@ray.remote(max_concurrency=4)  # type: ignore[call-overload]  # ray's stubs lack it
class NodeCommand:
    """The user's command on one node. An actor rather than a task so that ``kill`` is
    a call that returns only once the command's whole process group is gone."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader: threading.Thread | None = None

    def node_ip(self) -> str:
        return str(ray.util.get_node_ip_address())

    def start(self, command: str, env: dict[str, str], workdir: str | None) -> None:
        cwd = Path(workdir).expanduser() if workdir else Path.home()
        self.process = subprocess.Popen(
            ["bash", "-c", command], cwd=cwd if cwd.is_dir() else Path.home(),
            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))

    def read(self) -> tuple[list[str], int | None]:
        """New output lines (waiting briefly for the first), and the exit code once the
        command has ended and all its output was read."""
        assert self.process is not None and self.reader is not None
        lines = []
        try:
            lines.append(self.lines.get(timeout=READ_WAIT_S))
            while True:
                lines.append(self.lines.get_nowait())
        except queue.Empty:
            pass
        done = not self.reader.is_alive() and self.lines.empty()
        return lines, self.process.wait() if done else None

    def kill(self, grace_s: float = 3.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=grace_s)
                return
            except subprocess.TimeoutExpired:
                continue


class Driver:
    def __init__(self, spec: JobSpec):
        self.spec = spec
        self.write_lock = threading.Lock()
        self.return_codes: dict[int, int] = {}
        self.commands: list = []  # one NodeCommand actor per rank
        self.node_ips: list[str] = []  # the job's nodes, in cluster order (head first)

    def emit(self, rank: int, line: str) -> None:
        prefix = f"(rank={rank}, ip={self.node_ips[rank]}) " if self.spec.num_nodes > 1 else ""
        with self.write_lock:
            sys.stdout.write(prefix + line + "\n")
            sys.stdout.flush()

    def drain(self, rank: int) -> None:
        command = self.commands[rank]
        try:
            while True:
                lines, returncode = ray.get(command.read.remote())
                for line in lines:
                    self.emit(rank, line)
                if returncode is not None:
                    self.return_codes[rank] = returncode
                    return
        except ray.exceptions.RayError as exc:
            self.emit(rank, f"[orch] lost the command on this node: {exc}")
            self.return_codes.setdefault(rank, 1)

    def bundles(self) -> list[dict[str, float]]:
        """One bundle per node; the first is pinned to the head through Ray's own
        ``node:<ip>`` resource, so rank 0 is the head and a one-node job on a multi-node
        cluster always runs there (issue 12: users read rank 0's output as the head's).
        SkyPilot's plain STRICT_SPREAD bundles leave that to Ray's choice."""
        bundle = {"CPU": self.spec.cpus_per_node}
        head = {**bundle, f"node:{self.spec.cluster_ips[0]}": HEAD_PIN}
        return [head] + [bundle] * (self.spec.num_nodes - 1)

    def run(self) -> JobStatus:
        group = placement_group(self.bundles(), strategy="STRICT_SPREAD")
        ray.get(group.ready())  # PENDING until every node has room
        jobs.update(self.spec.id, status=JobStatus.RUNNING, started_at=jobs.now())
        actors = [
            NodeCommand.options(  # type: ignore[attr-defined]
                num_cpus=self.spec.cpus_per_node,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=index
                ),
            ).remote()
            for index in range(self.spec.num_nodes)
        ]
        # Ranks follow the cluster's order (head first) over the nodes the bundles got.
        bundle_ips = ray.get([actor.node_ip.remote() for actor in actors])
        self.node_ips = sorted(bundle_ips, key=self.spec.cluster_ips.index)
        self.commands = [actors[bundle_ips.index(ip)] for ip in self.node_ips]
        ray.get([
            command.start.remote(
                self.spec.run, node_environment(self.spec, self.node_ips, rank), self.spec.workdir
            )
            for rank, command in enumerate(self.commands)
        ])
        threads = [threading.Thread(target=self.drain, args=(rank,), daemon=True)
                   for rank in range(self.spec.num_nodes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failed = [r for r in range(self.spec.num_nodes) if self.return_codes.get(r, 1) != 0]
        return JobStatus.FAILED if failed else JobStatus.SUCCEEDED

    def cancel(self, timeout_s: float = 15.0) -> None:
        """Kill the command on every node, and wait until each says it is gone."""
        try:
            ray.get([command.kill.remote() for command in self.commands], timeout=timeout_s)
        except ray.exceptions.RayError as exc:
            print(f"[orch] cancelling: {exc}", flush=True)


def main() -> None:
    directory = Path(sys.argv[1])
    spec = JobSpec.model_validate_json((directory / "spec.json").read_text())
    driver = Driver(spec)

    def on_sigterm(signum: int, frame: object) -> None:
        driver.cancel()
        jobs.record_signalled_end(spec.id)
        os._exit(0)

    try:
        ray.init(address=spec.gcs_address, log_to_driver=False, logging_level=logging.ERROR)
        # After ray.init: Ray's core worker installs a SIGTERM handler of its own.
        signal.signal(signal.SIGTERM, on_sigterm)
        status = driver.run()
    except Exception as exc:  # recorded for the user; the driver has no one else to tell
        print(f"[orch] job driver failed: {exc!r}", flush=True)
        status = JobStatus.FAILED
    jobs.update(spec.id, status=status, ended_at=jobs.now())


if __name__ == "__main__":
    main()

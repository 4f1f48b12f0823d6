"""Twin hosts: a small Linux machine on this host for every EC2 instance moto runs.

moto keeps EC2's records but runs nothing. The twin gives each running instance a body:

* Network: a network namespace whose ``eth0`` carries the instance's private IP (moto's
  default VPC, 172.31.0.0/16), plugged into a bridge that lives in a namespace of its own
  (the twin's switch), so the machines reach each other without the host forwarding
  anything. The host reaches them through one veth into the switch, with a /32 route per
  instance and forwarding turned off on its end, so nothing a machine sends is routed
  beyond this host, and only addresses inside these namespaces are ever targets.
* A machine: sshd runs in a mount and PID namespace of its own (``unshare``), with its own
  ``/home/<user>`` (a per-instance directory), ``/tmp``, ``/run``, ``/dev/shm`` and
  ``/etc/ssh``, an ``/etc/passwd`` naming the image's login user, and its own ``/proc``:
  ``ray stop`` on one machine sees only that machine's processes. Killing the namespace's
  first process ends every process of the machine. The rest of the file system is shared;
  the login user is not root.
* The image (:class:`Image`): the login user's ``python3`` is an interpreter of this test
  run's Python version whose user site-packages hold this venv's packages (symbolic
  links), orch's excepted: an image with Ray preinstalled, and no orch.
* cloud-init: the public key of the instance's key pair (as moto recorded it) goes to the
  login user's ``~/.ssh/authorized_keys``.
* Stop and start: a stopped instance's machine powers off and keeps its files; when the
  instance runs again the machine boots from them (with an empty ``/tmp``).

:class:`TwinWatcher` polls moto and keeps one :class:`TwinHost` per running instance of a
cluster. moto gives every run the same private IPs, so one twin runs on a machine at a
time (:data:`MACHINE_LOCK`); the next one first removes what a twin killed mid-run left.

Needs root, ``ip`` (iproute2), ``unshare`` (util-linux), ``/usr/sbin/sshd`` and
``ssh-keygen`` (openssh-server, openssh-client).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import ipaddress
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orch.clouds.aws_images import ssh_user
from orch.clouds.base import TAG_CLUSTER

log = logging.getLogger(__name__)

VPC_NETWORK = ipaddress.ip_network("172.31.0.0/16")  # moto's default VPC
HOST_ADDRESS = "172.31.255.254"  # the host's end; outside every default subnet
SSHD = Path("/usr/sbin/sshd")
NAME_PREFIX = "otw"  # of every namespace and host interface a twin creates
# moto hands out the same private IPs to every run: one twin on a machine at a time.
MACHINE_LOCK = Path("/tmp/orch-aws-twin.lock")
START_TIMEOUT_S = 60.0  # a machine boots in about a second; a loaded 2-core host is slower
POLL_S = 0.5
_TOOLS = ("ip", "unshare", "ssh-keygen", "mount")

# Runs as the first process of the machine's PID namespace, in its own mount namespace.
_BOOT = """\
set -e
mount --make-rprivate /
mount --bind {root}/etc/ssh /etc/ssh
mount --bind {root}/etc/passwd /etc/passwd
mount --bind {root}/etc/group /etc/group
mount -t tmpfs -o mode=755 home /home
mkdir /home/{user}
mount --bind {root}/home /home/{user}
mount -t tmpfs -o mode=755 run /run
mkdir -m 755 /run/sshd
mount -t tmpfs -o mode=1777 shm /dev/shm
{keep_under_tmp}mount --rbind {root}/tmp /tmp
{sshd} -D -e &
wait
"""


def _run(*args: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than root can execute ``path`` (every parent searchable)."""
    for part in [*path.parents, path]:
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH:
            return False
    return True


@dataclass(frozen=True)
class Image:
    """The machine image: a ``python3`` for the login user, and where its Ray comes from."""

    python: Path  # an interpreter of this Python version
    site_packages: Path  # put in the user's site-packages

    @classmethod
    def of_this_venv(cls) -> Image:
        """This interpreter's base Python (the one this venv was made from) and this venv's
        packages."""
        return cls(python=Path(getattr(sys, "_base_executable", sys.executable)).resolve(),
                   site_packages=Path(sysconfig.get_paths()["purelib"]))

    @classmethod
    def for_other_users(cls) -> Image | None:
        """Like :meth:`of_this_venv`, with an interpreter a non-root user can run: the base
        Python may sit under root's home; the distribution's own one of the same version
        then serves. None when there is none."""
        this = cls.of_this_venv()
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        candidates = [this.python, Path(f"/usr/bin/python{version}"),
                      Path(f"/usr/local/bin/python{version}")]
        if not _reachable_by_others(this.site_packages):
            return None
        for python in candidates:
            if python.exists() and _reachable_by_others(python):
                return cls(python=python, site_packages=this.site_packages)
        return None

    def install(self, home: Path) -> None:
        """Make ``python3`` in a login shell of ``home``'s user this image's interpreter, with
        every package of ``site_packages`` but orch in the user's site-packages."""
        bin_dir = home / ".local" / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / "python3").unlink(missing_ok=True)
        (bin_dir / "python3").symlink_to(self.python)
        # As Debian's /etc/skel/.profile: the user's own bin/ first.
        (home / ".profile").write_text(
            'if [ -d "$HOME/.local/bin" ]; then PATH="$HOME/.local/bin:$PATH"; fi\n')
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        user_site = home / ".local" / "lib" / f"python{version}" / "site-packages"
        user_site.mkdir(parents=True, exist_ok=True)
        orch_packages = set(
            (importlib.metadata.distribution("orch").read_text("top_level.txt") or "").split())
        for entry in self.site_packages.iterdir():
            if not _is_orch(entry.name, orch_packages) and not (user_site / entry.name).exists():
                (user_site / entry.name).symlink_to(entry)


def _is_orch(name: str, packages: set[str]) -> bool:
    """Whether a site-packages entry is orch's: one of its packages, its metadata, or the
    finder of its editable install."""
    return name in packages or (name.startswith(("orch-", "__editable__")) and "orch" in name)


def unavailable_reason() -> str | None:
    """Why the twin cannot run here, or None when it can."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "the AWS twin creates network namespaces and runs sshd: it needs root on Linux"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if not SSHD.exists():
        missing.append(str(SSHD))
    if missing:
        return (f"the AWS twin needs {', '.join(missing)} "
                "(apt-get install -y iproute2 openssh-server openssh-client util-linux)")
    if Image.for_other_users() is None:
        return ("the AWS twin needs a python3 of this version that a non-root user can run, "
                "and this venv readable by others")
    return None


def _chown_tree(path: Path, uid: int) -> None:
    os.lchown(path, uid, uid)
    for directory, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(directory, name), uid, uid)


def _free_uid() -> int:
    used = {entry.pw_uid for entry in pwd.getpwall()}
    return next(uid for uid in range(1000, 60000) if uid not in used)


class TwinSwitch:
    """The bridge every machine plugs into, in a namespace of its own, and the host's veth
    into it."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.netns = f"{prefix}-sw"
        self.uplink = f"{prefix}h"  # an interface name: at most 15 characters
        self._ports = 0

    def start(self) -> None:
        _run("ip", "netns", "add", self.netns)
        _run("ip", "-n", self.netns, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.netns, "link", "set", "dev", "br0", "up")
        _run("ip", "link", "add", self.uplink, "type", "veth", "peer", "name", "host",
             "netns", self.netns)
        _run("ip", "-n", self.netns, "link", "set", "dev", "host", "master", "br0", "up")
        Path(f"/proc/sys/net/ipv4/conf/{self.uplink}/forwarding").write_text("0\n")
        _run("ip", "addr", "add", f"{HOST_ADDRESS}/32", "dev", self.uplink)
        _run("ip", "link", "set", "dev", self.uplink, "up")

    def plug(self, netns: str, ip: str) -> str:
        """Give ``netns`` an ``eth0`` with ``ip`` on the bridge, and the host a route to it;
        returns the bridge's port for it."""
        self._ports += 1
        port = f"p{self._ports}"
        _run("ip", "link", "add", port, "netns", self.netns, "type", "veth",
             "peer", "name", "eth0", "netns", netns)
        _run("ip", "-n", self.netns, "link", "set", "dev", port, "master", "br0", "up")
        _run("ip", "-n", netns, "addr", "add", f"{ip}/{VPC_NETWORK.prefixlen}", "dev", "eth0")
        _run("ip", "-n", netns, "link", "set", "dev", "eth0", "up")
        _run("ip", "-n", netns, "link", "set", "dev", "lo", "up")
        # As in a VPC: a default gateway. The host forwards nothing from the uplink.
        _run("ip", "-n", netns, "route", "add", "default", "via", HOST_ADDRESS)
        _run("ip", "route", "add", f"{ip}/32", "dev", self.uplink, "src", HOST_ADDRESS)
        return port

    def unplug(self, ip: str, port: str) -> None:
        """Remove the route and the port: deleting the port deletes its veth pair, so the
        machine's ``eth0`` leaves the bridge at once, even while the dying machine's
        namespace lingers (a machine started again on the same address must not share the
        bridge with its former self)."""
        subprocess.run(["ip", "route", "del", f"{ip}/32", "dev", self.uplink],
                       capture_output=True)
        subprocess.run(["ip", "-n", self.netns, "link", "del", port], capture_output=True)

    def stop(self) -> None:
        """Deleting the namespace deletes its veth ends, and with them the host's and the
        routes through it."""
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.uplink], capture_output=True)


@dataclass
class TwinHost:
    """One instance's machine (see the module docstring)."""

    instance_id: str
    ip: str
    user: str
    authorized_key: str
    image: Image
    root: Path  # the machine's own files on this host
    switch: TwinSwitch
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    port: str = ""  # the switch's port while plugged in

    @property
    def netns(self) -> str:
        return f"{self.switch.prefix}-{self.instance_id}"

    @property
    def home(self) -> Path:
        """The login user's home, as seen from this host."""
        return self.root / "home"

    def _prepare(self) -> None:
        uid = _free_uid()
        (self.root / "etc" / "ssh").mkdir(parents=True)
        (self.root / "tmp").mkdir(mode=0o1777)
        os.chmod(self.root / "tmp", 0o1777)
        passwd = [line for line in Path("/etc/passwd").read_text().splitlines()
                  if not line.startswith(f"{self.user}:")]
        group = [line for line in Path("/etc/group").read_text().splitlines()
                 if not line.startswith(f"{self.user}:")]
        passwd.append(f"{self.user}:x:{uid}:{uid}::/home/{self.user}:/bin/bash")
        group.append(f"{self.user}:x:{uid}:")
        (self.root / "etc" / "passwd").write_text("\n".join(passwd) + "\n")
        (self.root / "etc" / "group").write_text("\n".join(group) + "\n")
        ssh = self.root / "etc" / "ssh"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.instance_id,
             "-f", str(ssh / "ssh_host_ed25519_key"))
        (ssh / "sshd_config").write_text(
            f"ListenAddress {self.ip}\n"
            "Port 22\n"
            "HostKey /etc/ssh/ssh_host_ed25519_key\n"
            "PidFile /run/sshd.pid\n"
            "AuthorizedKeysFile .ssh/authorized_keys\n"
            "UsePAM no\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin no\n"
            f"AllowUsers {self.user}\n"
            "Subsystem sftp internal-sftp\n"
            "LogLevel INFO\n"
        )
        dot_ssh = self.home / ".ssh"
        dot_ssh.mkdir(parents=True, mode=0o700)
        (dot_ssh / "authorized_keys").write_text(self.authorized_key.strip() + "\n")
        os.chmod(dot_ssh / "authorized_keys", 0o600)
        self.image.install(self.home)
        os.chmod(self.home, 0o755)
        _chown_tree(self.home, uid)


    def _keep_under_tmp(self) -> str:
        """The image's packages stay visible when they live under /tmp (a checkout there):
        bound into the machine's own /tmp before it replaces the host's."""
        packages = self.image.site_packages.resolve()
        if not packages.is_relative_to("/tmp"):
            return ""
        inside = self.root / "tmp" / packages.relative_to("/tmp")
        return f"mkdir -p {inside}\nmount --bind {packages} {inside}\n"
    def _reboot(self) -> None:
        """A stopped instance that starts again keeps its disk (its home, host keys and
        users, as an EBS root volume does); only ``/tmp`` is emptied, as a boot does."""
        shutil.rmtree(self.root / "tmp")
        (self.root / "tmp").mkdir()
        os.chmod(self.root / "tmp", 0o1777)

    def start(self) -> None:
        if ipaddress.ip_address(self.ip) not in VPC_NETWORK:
            raise ValueError(f"{self.instance_id} has {self.ip}, outside {VPC_NETWORK}: "
                             "the twin only hosts addresses of moto's default VPC")
        if self.root.exists():
            self._reboot()
        else:
            self._prepare()
        _run("ip", "netns", "add", self.netns)
        self.port = self.switch.plug(self.netns, self.ip)
        boot = _BOOT.format(root=self.root, user=self.user, sshd=SSHD,
                            keep_under_tmp=self._keep_under_tmp())
        with open(self.root / "machine.log", "ab") as machine_log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--pid", "--fork",
                 "--mount-proc", "--kill-child", "--", "bash", "-c", boot],
                stdout=machine_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._listening():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd of {self.instance_id} did not start:\n"
                                   + (self.root / "machine.log").read_text(errors="replace"))
            time.sleep(0.1)

    def _listening(self) -> bool:
        try:
            with socket.create_connection((self.ip, 22), timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Power off: kill every process of the machine, unplug it, delete its namespace.
        Its files stay in ``root`` (the test's temporary directory)."""
        if self.process is not None:
            # unshare --kill-child kills the namespace's first process, and with it the rest.
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None
        if self.port:
            self.switch.unplug(self.ip, self.port)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]


def _sweep() -> None:
    """Remove every twin namespace (killing what runs in it) and host interface. Called
    with the machine lock held, when no twin is running."""
    for name in _namespaces():
        if name.startswith(NAME_PREFIX):
            for pid in _run("ip", "netns", "pids", name).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    for line in _run("ip", "-o", "link", "show").splitlines():
        interface = line.split(":")[1].strip().split("@")[0]
        if interface.startswith(NAME_PREFIX):
            subprocess.run(["ip", "link", "del", interface], capture_output=True)


class TwinWatcher:
    """Polls moto's DescribeInstances and keeps a TwinHost for every running instance of
    ``cluster`` (in the EC2 client's region): one comes up when its instance runs, goes
    when it stops or terminates."""

    def __init__(self, ec2: Any, cluster: str, directory: Path, image: Image):
        self.ec2 = ec2
        self.cluster = cluster
        self.directory = directory
        self.image = image
        self.switch = TwinSwitch(f"{NAME_PREFIX}{secrets.token_hex(3)}")
        self.hosts: dict[str, TwinHost] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="twin-watcher", daemon=True)
        self._lock = threading.Lock()

    def __enter__(self) -> TwinWatcher:
        self._machine_lock = open(MACHINE_LOCK, "a")  # noqa: SIM115 - held until close()
        fcntl.flock(self._machine_lock, fcntl.LOCK_EX)
        try:
            _sweep()  # what a twin killed mid-run left behind
            self.switch.start()
            self._thread.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop watching, power every machine off, remove the switch; release the machine."""
        try:
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join()
            with self._lock:
                for host in self.hosts.values():
                    host.stop()
                self.hosts.clear()
            self.switch.stop()
            _sweep()
        finally:
            self._machine_lock.close()

    def namespaces(self) -> list[str]:
        """This twin's namespaces that exist now."""
        return [name for name in _namespaces() if name.startswith(f"{self.switch.prefix}-")]

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as exc:  # noqa: BLE001 - reported to the test, polling goes on
                log.exception("twin watcher")
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(POLL_S)

    def _sync(self) -> None:
        reservations = self.ec2.describe_instances(Filters=[
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]}])["Reservations"]
        instances = {i["InstanceId"]: i for r in reservations for i in r["Instances"]}
        with self._lock:
            for instance_id, host in list(self.hosts.items()):
                state = instances.get(instance_id, {}).get("State", {}).get("Name")
                if state != "running":
                    host.stop()
                    del self.hosts[instance_id]
            for instance_id, instance in instances.items():
                if instance["State"]["Name"] == "running" and instance_id not in self.hosts:
                    host = self._host(instance)
                    self.hosts[instance_id] = host
                    host.start()

    def _host(self, instance: dict[str, Any]) -> TwinHost:
        images = self.ec2.describe_images(ImageIds=[instance["ImageId"]])["Images"]
        key = ""
        if instance.get("KeyName"):
            pairs = self.ec2.describe_key_pairs(KeyNames=[instance["KeyName"]],
                                                IncludePublicKey=True)["KeyPairs"]
            key = pairs[0]["PublicKey"]
        return TwinHost(instance_id=instance["InstanceId"], ip=instance["PrivateIpAddress"],
                        user=ssh_user(images[0] if images else None), authorized_key=key,
                        image=self.image, root=self.directory / instance["InstanceId"],
                        switch=self.switch)

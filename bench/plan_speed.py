"""Warm plan time per task on the full catalog: orch's optimizer against SkyPilot's own
``Optimizer.optimize``, in the same run, on the same catalog facts.

Usage::

    python -m venv /tmp/skyvenv && /tmp/skyvenv/bin/pip install skypilot
    .venv/bin/python bench/plan_speed.py --sky-python /tmp/skyvenv/bin/python \\
        --source CHECKOUT   # a checkout of anycloud-sh/catalog (gcp/ and azure/vms.csv)

SkyPilot reads a catalog in its own format from ``$SKY_RUNTIME_DIR/.sky/catalogs/v8``; this
script lays one out in a temporary directory: GCP's and Azure's upstream files, the very
files ``scripts/refresh_catalog.py`` turns into orch's, and orch's own AWS file written back
in SkyPilot's format (the upstream AWS file is not in the snapshot orch's AWS rows were
transcribed from). No ``.meta`` md5 files are written, so SkyPilot treats the files as
user-provided and plans offline. Both sides get AWS, GCP and Azure (orch's local cloud is
left out). Each task is planned once cold, then ``--repeats`` times; the table shows the
median warm time. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orch.catalog import CATALOG_CLOUDS, load_catalog  # noqa: E402
from orch.optimizer import HostResources, plan  # noqa: E402
from orch.spec import Task  # noqa: E402

TASKS: dict[str, dict[str, Any]] = {
    "default (nothing sized)": {},
    "cpus: 4+": {"cpus": "4+"},
    "cpus: 16, memory: 64+": {"cpus": "16", "memory": "64+"},
    "memory: 512+": {"memory": "512+"},
    "T4": {"accelerators": "T4"},
    "T4, spot": {"accelerators": "T4", "use_spot": True},
    "A100:8, spot": {"accelerators": "A100:8", "use_spot": True},
    "H100:8": {"accelerators": "H100:8"},
    "any_of L4 / A10G": {"any_of": [{"accelerators": "L4"}, {"accelerators": "A10G"}]},
}
SKY_AWS_HEADER = ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
                  "GpuInfo", "Price", "SpotPrice", "Region", "AvailabilityZone", "Arch"]


def _aws_in_skypilot_format(path: Path) -> None:
    """orch's AWS rows in SkyPilot's AWS columns (zone names, as SkyPilot uses without an
    account's zone-ID mapping)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SKY_AWS_HEADER)
        for r in load_catalog("aws").rows:
            writer.writerow([r.instance_type, r.accelerator_name or "",
                             r.accelerator_count or "", r.vcpus, r.memory_gib, "", r.price,
                             "" if r.spot_price is None else r.spot_price, r.region, r.zone,
                             "x86_64"])


def _normalized(source: Path, target: Path) -> None:
    """The upstream file with one field per column: some of its Azure rows list two
    generations unquoted (``V1,V2``), which pandas, and so SkyPilot, refuses to parse
    (orch's refresh script reads them with csv.DictReader, which keeps the first)."""
    with source.open(newline="") as src, target.open("w", newline="") as dst:
        rows = csv.reader(src)
        header = next(rows)
        writer = csv.writer(dst)
        writer.writerow(header)
        writer.writerows(row[:len(header)] for row in rows)


def _accelerator_names(path: Path) -> None:
    """SkyPilot's common/accelerators.csv (which cloud offers which accelerator name)."""
    clouds: dict[str, list[str]] = {}
    for cloud in CATALOG_CLOUDS:
        for name in load_catalog(cloud).accelerator_names:
            clouds.setdefault(name, []).append({"aws": "AWS", "gcp": "GCP"}.get(cloud, "Azure"))
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["AcceleratorName", "Clouds"])
        writer.writerows([name, str(sorted(c))] for name, c in sorted(clouds.items()))


def lay_out_skypilot_catalog(source: Path, runtime: Path) -> None:
    catalogs = runtime / ".sky" / "catalogs" / "v8"
    for cloud in ("gcp", "azure"):
        (catalogs / cloud).mkdir(parents=True)
        _normalized(source / cloud / "vms.csv", catalogs / cloud / "vms.csv")
    (catalogs / "aws").mkdir(parents=True)
    _aws_in_skypilot_format(catalogs / "aws" / "vms.csv")
    (catalogs / "common").mkdir(parents=True)
    _accelerator_names(catalogs / "common" / "accelerators.csv")
    (catalogs / "common" / "metadata.csv").write_text("GPU,MemoryGB,Manufacturer\n")
    for name in ("aws/images.csv", "gcp/images.csv", "azure/images.csv"):
        (catalogs / name).write_text("Tag,Region,OS,OSVersion,ImageId,CreationDate\n")


def orch_side(repeats: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    host = HostResources(cpus=1, memory_gb=1.0)
    for name, resources in TASKS.items():
        task = Task.model_validate({"run": "echo hi", "resources": resources})
        plan(task, host=host, allowed_clouds=CATALOG_CLOUDS)  # cold
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            found = plan(task, host=host, allowed_clouds=CATALOG_CLOUDS)
            times.append(time.perf_counter() - start)
        best = found[0]
        where = "/".join([best.cloud, best.region, *best.zones[:1]])
        acc = best.accelerators_text()
        out[name] = {"choice": f"{where} {best.instance_type}" + (f" {acc}" if acc else "")
                     + (" spot" if best.use_spot else ""),
                     "price": best.price_per_hour, "warm_s": statistics.median(times),
                     "candidates": len(found)}
    return out


def skypilot_side(sky_python: str, runtime: Path, repeats: int) -> dict[str, dict[str, Any]]:
    env = {**os.environ, "SKY_RUNTIME_DIR": str(runtime), "HOME": str(runtime)}
    result = subprocess.run(
        [sky_python, str(ROOT / "bench" / "skypilot_side.py")],
        input=json.dumps({"tasks": TASKS, "repeats": repeats}), capture_output=True,
        text=True, env=env, check=False, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"SkyPilot side failed:\n{result.stderr[-3000:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def table(sky: dict[str, dict[str, Any]], orch: dict[str, dict[str, Any]]) -> str:
    lines = ["| task | SkyPilot's choice | $/h | orch's choice | $/h | SkyPilot warm | "
             "orch warm | speed-up |", "|---|---|---|---|---|---|---|---|"]
    for name in TASKS:
        s, o = sky[name], orch[name]
        if "error" in s:
            lines.append(f"| {name} | {s['error']} | | {o['choice']} | {o['price']:.4f} | | "
                         f"{o['warm_s'] * 1000:.1f} ms | |")
            continue
        lines.append(
            f"| {name} | {s['choice']} | {s['price']:.4f} | {o['choice']} | {o['price']:.4f} "
            f"| {s['warm_s'] * 1000:.0f} ms | {o['warm_s'] * 1000:.1f} ms "
            f"| {s['warm_s'] / o['warm_s']:.0f}× |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sky-python", required=True,
                        help="the python of a venv with SkyPilot installed")
    parser.add_argument("--source", type=Path, required=True,
                        help="a checkout of the catalog source (gcp/vms.csv, azure/vms.csv)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="plan_speed_") as tmp:
        runtime = Path(tmp)
        lay_out_skypilot_catalog(args.source, runtime)
        sky = skypilot_side(args.sky_python, runtime, args.repeats)
    orch = orch_side(args.repeats)
    print(table(sky, orch))


if __name__ == "__main__":
    main()

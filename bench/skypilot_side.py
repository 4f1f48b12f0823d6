"""SkyPilot's half of bench/plan_speed.py; runs in a venv with SkyPilot installed.

Reads ``{"tasks": {name: resources}, "repeats": n}`` as JSON on stdin, plans each task with
SkyPilot's own ``Optimizer.optimize`` on the catalog under ``$SKY_RUNTIME_DIR/.sky/catalogs``
(offline: the CSVs are there and no ``.meta`` md5 files, so nothing is downloaded), and
prints ``{name: {"choice", "price", "warm_s", "error"}}`` as JSON. Clouds are enabled as
SkyPilot's tests' ``enable_all_clouds`` fixture does (patched credential checks), limited to
the three clouds orch plans on.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any


def _enable_clouds() -> None:
    """What ``enable_all_clouds`` patches, for AWS, GCP and Azure."""
    from sky import check, clouds
    from sky.backends import backend_utils

    enabled = [clouds.AWS(), clouds.GCP(), clouds.Azure()]
    check.get_cached_enabled_clouds_or_refresh = lambda *_a, **_k: enabled
    check.check = lambda *_a, **_k: None
    backend_utils.check_owner_identity = lambda *_a, **_k: None
    for cloud in enabled:
        type(cloud).check_quota_available = classmethod(lambda *_a, **_k: True)


def _plan_once(resources: dict[str, Any]) -> tuple[float, Any]:
    import sky
    from sky import optimizer

    task = sky.Task.from_yaml_config({"run": "echo hi", "resources": resources})
    with sky.Dag() as dag:
        dag.add(task)
    start = time.perf_counter()
    optimizer.Optimizer.optimize(dag, quiet=True)
    return time.perf_counter() - start, task.best_resources


def _describe(best: Any) -> tuple[str, float]:
    accs = best.accelerators or {}
    acc = ",".join(f"{k}:{v:g}" for k, v in accs.items())
    where = "/".join(p for p in (str(best.cloud).lower(), best.region or "", best.zone or "") if p)
    text = f"{where} {best.instance_type}" + (f" {acc}" if acc else "")
    return text + (" spot" if best.use_spot else ""), best.get_cost(3600)


def main() -> None:
    request = json.load(sys.stdin)
    _enable_clouds()
    out: dict[str, dict[str, Any]] = {}
    for name, resources in request["tasks"].items():
        try:
            _plan_once(resources)  # cold: catalogs load, caches fill
            times = []
            for _ in range(request["repeats"]):
                seconds, best = _plan_once(resources)
                times.append(seconds)
            choice, price = _describe(best)
            out[name] = {"choice": choice, "price": price, "warm_s": statistics.median(times)}
        except Exception as exc:  # noqa: BLE001 - reported in the table, not raised
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

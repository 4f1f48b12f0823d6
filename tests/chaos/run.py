"""A chaos campaign: ``python -m tests.chaos.run --seed 12 --runs 20 [--lanes K]``.

Starts an embedded control plane in a throwaway ORCH_HOME (``--lanes K``: K of them, each
in its own home, taking the runs in turn), tells ``--runs`` seeded chaos runs on it (see
:mod:`tests.chaos.harness`), prints a table per run and a summary, stops the control
plane, and exits 1 if any check failed. The home is kept (and named) when a
run failed, for its logs (``server/worker.log``, ``server/temporal.log``).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tests.chaos.harness import Result, plan, run_once
from tests.e2e.conftest import Orch

SLOW_RESUME_S = 60.0  # a run slower than this to resume shows its story's evidence


def campaign(seed: int, runs: Iterable[int], home: Path, console: Console | None = None,
             budget_s: float = math.inf) -> list[Result]:
    """Every run in ``runs`` on one control plane in ``home`` (none started once
    ``budget_s`` has passed); the control plane stopped after."""
    cli = Orch(home)
    results: list[Result] = []
    deadline = time.monotonic() + budget_s
    try:
        for run in runs:
            if time.monotonic() > deadline:
                break
            chosen = plan(seed, run)
            if console:
                console.print(f"run {run}: {chosen.story} ({chosen.num_nodes} nodes), kill at "
                              f"{chosen.kill_at_s} s{', server too' if chosen.kill_server else ''}")
            results.append(run_once(cli, chosen))
            if console:
                console.print(f"  run {run}: {_verdict(results[-1])}")
                if results[-1].evidence and not (results[-1].ok and (results[-1].resume_s or 0)
                                                 < SLOW_RESUME_S):
                    console.print(f"  killed at {results[-1].killed_at} UTC; the story's record:")
                    console.print(results[-1].evidence, markup=False, highlight=False)
    finally:
        cli("server", "stop", check=False)
    return results


def _verdict(result: Result) -> str:
    if result.ok:
        return "ok"
    problems = [("harness error: " + result.error) if result.error else "",
                ("stuck: " + result.stuck) if result.stuck else "",
                ("wrong: " + result.wrong) if result.wrong else "",
                ("leaked: " + ", ".join(result.leaked)) if result.leaked else "",
                ("duplicates: " + ", ".join(result.duplicates)) if result.duplicates else ""]
    return "; ".join(p for p in problems if p)


def runs_table(results: list[Result]) -> Table:
    table = Table(title="chaos runs")
    for column in ("run", "story", "nodes", "kill at s", "during", "server", "restart s",
                   "resume s", "retried", "verdict"):
        table.add_column(column)
    for r in results:
        table.add_row(str(r.plan.run), r.plan.story, str(r.plan.num_nodes), str(r.plan.kill_at_s),
                      r.killed_during or "(after)", "killed" if r.plan.kill_server else "",
                      str(r.restart_s), "-" if r.resume_s is None else str(r.resume_s),
                      ", ".join(r.retried), _verdict(r))
    return table


def summary_table(seed: int, results: list[Result]) -> Table:
    resumed = [r.resume_s for r in results if r.resume_s is not None]
    table = Table(title=f"chaos summary, seed {seed}")
    cells = {
        "runs": len(results),
        "kills": len(results) + sum(r.plan.kill_server for r in results),
        "server restarts": sum(r.plan.kill_server for r in results),
        "leaked": sum(len(r.leaked) for r in results),
        "duplicates": sum(len(r.duplicates) for r in results),
        "stuck": sum(bool(r.stuck) for r in results),
        "wrong statuses": sum(bool(r.wrong) for r in results),
        "harness errors": sum(bool(r.error) for r in results),
        "slowest resume s": max(resumed) if resumed else "-",
    }
    for column in cells:
        table.add_column(column)
    table.add_row(*(str(value) for value in cells.values()))
    return table


def lanes(seed: int, runs: list[int], homes: list[Path], console: Console,
          budget_s: float) -> list[Result]:
    """The runs dealt round-robin to one control plane per home, run side by side."""
    for home in homes:  # one at a time: two servers starting at once could race for a port
        Orch(home)("server", "start")
    with ThreadPoolExecutor(len(homes)) as pool:
        shares = pool.map(lambda lane: campaign(seed, runs[lane::len(homes)], homes[lane],
                                                console, budget_s), range(len(homes)))
        return sorted((r for share in shares for r in share), key=lambda r: r.plan.run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--first", type=int, default=0, help="the first run's index")
    parser.add_argument("--lanes", type=int, default=1,
                        help="control planes side by side, each in its own ORCH_HOME")
    parser.add_argument("--budget-min", type=float, default=math.inf,
                        help="start no run after this many minutes")
    parser.add_argument("--keep", action="store_true", help="keep the ORCH_HOME even if all pass")
    args = parser.parse_args(argv)
    console = Console(width=200)
    homes = [Path(tempfile.mkdtemp(prefix=f"orch-chaos-{lane}-")) for lane in range(args.lanes)]
    results = lanes(args.seed, list(range(args.first, args.first + args.runs)), homes, console,
                    args.budget_min * 60)
    console.print(runs_table(results))
    console.print(summary_table(args.seed, results))
    failed = not all(r.ok for r in results)
    for home in homes:
        if failed or args.keep:
            console.print(f"kept {home} for its logs")
        else:
            shutil.rmtree(home, ignore_errors=True)
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())

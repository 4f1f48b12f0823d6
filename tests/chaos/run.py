"""A chaos campaign: ``python -m tests.chaos.run --seed 12 --runs 100 [--lanes K]``.

Each run is drawn from its seed and index (:mod:`tests.chaos.plans`) and told on its cloud
(:mod:`tests.chaos.harness`). Runs on the local cloud are dealt round-robin to ``--lanes``
control planes side by side, each in its own ORCH_HOME; runs on AWS go to one more lane
with moto, the fault front and the twin (one twin per machine), or are skipped, with the
reason, where the twin cannot run.

Restartable: every finished run is appended to ``<out>/results.jsonl`` (``--out``,
default ``$TMPDIR/orch-chaos-seed-<S>``); the same command run again first stops what an
interrupted campaign left running in ``<out>/lanes/``, then tells only the runs not yet
recorded, and prints the table of them all. A lane whose run failed keeps that run's
ORCH_HOME (its ``server/worker.log``, ``server/temporal.log``) and goes on in a new one;
the workflow histories of a failed run go to ``<out>/lanes/<lane>/evidence/<run>/``.
Prints a row per run, a table per story, the summary, and last the summary as one JSON
line; exits 1 if any run failed.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from tests.chaos.aws_world import AwsWorld
from tests.chaos.harness import Result, run_once
from tests.chaos.lanes import Journal, Lane, retire_all
from tests.chaos.local_world import LocalWorld
from tests.chaos.plans import plan
from tests.chaos.report import (
    runs_table,
    stories_table,
    summary_line,
    summary_table,
    verdict,
)

SLOW_RESUME_S = 60.0  # a run slower than this to resume shows its story's evidence


def _say(console: Console | None, result: Result) -> None:
    if console is None:
        return
    console.print(f"  run {result.plan.run}: {verdict(result)} ({result.took_s} s)")
    if result.evidence and not (result.ok and (result.resume_s or 0) < SLOW_RESUME_S):
        console.print(f"  killed at {result.killed_at} UTC; the story's record:")
        console.print(result.evidence, markup=False, highlight=False)


def campaign(seed: int, runs: list[int], lane: Lane, record: Callable[[Result], None],
             console: Console | None = None, deadline: float = math.inf,
             stopping: threading.Event | None = None) -> None:
    """Every run in ``runs`` on ``lane``, none started after ``deadline`` (monotonic) or once
    ``stopping`` is set; each result passed to ``record`` as it ends."""
    cli = lane.fresh_home()
    try:
        for run in runs:
            if time.monotonic() > deadline or (stopping and stopping.is_set()):
                break
            chosen = plan(seed, run)
            if console:
                console.print(f"run {run} ({lane.name}): {chosen.story} ({chosen.num_nodes} "
                              f"nodes), kill {chosen.kill} at {chosen.kill_at_s} s, down "
                              f"{chosen.outage_s} s", highlight=False)
            result = run_once(cli, lane.world, chosen, lane.root / "evidence")
            record(result)
            _say(console, result)
            if not result.ok:  # keep its home for the logs; go on in a clean one
                lane.retire(cli)
                cli = lane.fresh_home()
    finally:
        lane.retire(cli)


def _skipped(seed: int, runs: list[int], reason: str) -> list[Result]:
    return [Result(plan(seed, run), skipped=reason) for run in runs]


def run_campaign(seed: int, runs: list[int], out: Path, local_lanes: int = 1,
                 console: Console | None = None, budget_s: float = math.inf,
                 aws: AwsWorld | None = None) -> list[Result]:
    """Tell the ``runs`` of ``seed`` not yet recorded in ``out``; every result of them.
    ``aws``: the AWS world to use (one is made when AWS runs need it and the twin can run)."""
    journal = Journal(out / "results.jsonl", seed)
    retire_all(out / "lanes")
    todo = [run for run in runs if run not in journal.results]
    on_aws = [run for run in todo if plan(seed, run).cloud == "aws"]
    on_local = [run for run in todo if run not in on_aws]
    skipped: list[Result] = []
    reason = AwsWorld.unavailable() if on_aws else None
    if reason:
        skipped, on_aws = _skipped(seed, on_aws, reason), []
    made = aws is None and bool(on_aws)
    if made:
        aws = AwsWorld(out / "aws")
    shares: list[tuple[Lane, list[int]]] = [
        (Lane(f"local-{n}", LocalWorld(), out / "lanes" / f"local-{n}"), on_local[n::local_lanes])
        for n in range(local_lanes)]
    if on_aws and aws is not None:
        shares.append((Lane("aws", aws, out / "lanes" / "aws"), on_aws))
    deadline = time.monotonic() + budget_s
    stopping = threading.Event()
    threads = [threading.Thread(target=campaign, daemon=True, name=lane.name,
                                args=(seed, share, lane, journal.record, console, deadline,
                                      stopping))
               for lane, share in shares if share]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(1)
    except KeyboardInterrupt:
        stopping.set()
        if console:
            console.print("stopping after the runs under way (Ctrl-C again to leave them: "
                          "the same command resumes)")
        for thread in threads:
            thread.join()
    finally:
        if made and aws is not None:
            aws.close()
    return sorted([journal.results[r] for r in runs if r in journal.results] + skipped,
                  key=lambda r: r.plan.run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--first", type=int, default=0, help="the first run's index")
    parser.add_argument("--only", type=lambda text: [int(n) for n in text.split(",")],
                        default=None, help="just these runs, e.g. 8,21 (to replay one)")
    parser.add_argument("--lanes", type=int, default=1,
                        help="local-cloud control planes side by side (AWS runs: one more)")
    parser.add_argument("--budget-min", type=float, default=math.inf,
                        help="start no run after this many minutes")
    parser.add_argument("--out", type=Path, default=None,
                        help="results and homes (default: $TMPDIR/orch-chaos-seed-<seed>)")
    parser.add_argument("--fresh", action="store_true",
                        help="forget the results already in --out and start over")
    parser.add_argument("--keep", action="store_true", help="keep the homes even if all pass")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.gettempdir()) / f"orch-chaos-seed-{args.seed}"
    if args.fresh:
        retire_all(out / "lanes")
        shutil.rmtree(out, ignore_errors=True)
    console = Console(width=220)
    console.print(f"results in {out}/results.jsonl")
    runs = args.only or list(range(args.first, args.first + args.runs))
    results = run_campaign(args.seed, runs, out,
                           args.lanes, console, args.budget_min * 60)
    console.print(runs_table(results))
    console.print(stories_table(results))
    console.print(summary_table(args.seed, results))
    failed = not all(r.ok for r in results)
    if failed or args.keep:
        console.print(f"kept {out / 'lanes'} for its logs")
    else:
        for made in ("lanes", "aws"):
            shutil.rmtree(out / made, ignore_errors=True)
    print(summary_line(args.seed, results), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""What a chaos campaign prints: a row per run, the summary issue 12 asks for (runs, kills,
server restarts, leaked, duplicates, stuck, slowest resume), the same per story, and the
summary as one JSON line for scripts.

"kills" counts processes SIGKILLed (a run that kills the worker and the server counts
two); "server restarts" counts runs whose dev server was killed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from rich.table import Table

from tests.chaos.harness import Result
from tests.chaos.plans import Plan


def verdict(result: Result) -> str:
    if result.skipped:
        return "skipped: " + result.skipped
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
    for column in ("run", "story", "nodes", "kill at s", "during", "killed", "down s",
                   "restart s", "resume s", "took s", "retried", "verdict"):
        table.add_column(column)
    for r in results:
        table.add_row(str(r.plan.run), r.plan.story, str(r.plan.num_nodes), str(r.plan.kill_at_s),
                      r.killed_during or "(after)", r.plan.kill, str(r.plan.outage_s),
                      str(r.restart_s), "-" if r.resume_s is None else str(r.resume_s),
                      str(r.took_s), ", ".join(r.retried)[:200], verdict(r)[:300])
    return table


def summary(results: Iterable[Result]) -> dict[str, Any]:
    """The campaign's figures; skipped runs count only as skipped."""
    results = list(results)
    judged = [r for r in results if not r.skipped]
    resumed = [r.resume_s for r in judged if r.resume_s is not None]
    return {
        "runs": len(judged),
        "skipped": len(results) - len(judged),
        "kills": sum(r.plan.processes_killed for r in judged),
        "server restarts": sum(r.plan.kills_server for r in judged),
        "leaked": sum(len(r.leaked) for r in judged),
        "duplicates": sum(len(r.duplicates) for r in judged),
        "stuck": sum(bool(r.stuck) for r in judged),
        "wrong statuses": sum(bool(r.wrong) for r in judged),
        "harness errors": sum(bool(r.error) for r in judged),
        "slowest resume s": max(resumed) if resumed else None,
    }


def _table(title: str, first: str, rows: dict[str, dict[str, Any]]) -> Table:
    table = Table(title=title)
    columns = list(next(iter(rows.values())).keys()) if rows else list(summary([]).keys())
    for column in (first, *columns):
        table.add_column(column)
    for key, cells in rows.items():
        table.add_row(key, *("-" if v is None else str(v) for v in cells.values()))
    return table


def summary_table(seed: int, results: list[Result]) -> Table:
    return _table(f"chaos summary, seed {seed}", "seed", {str(seed): summary(results)})


def stories_table(results: list[Result]) -> Table:
    stories = sorted({r.plan.story for r in results})
    return _table("per story", "story",
                  {s: summary(r for r in results if r.plan.story == s) for s in stories})


def summary_line(seed: int, results: list[Result]) -> str:
    """The summary as one JSON line: ``{"chaos": {"seed": …, "runs": …, …, "per story": …}}``."""
    stories = sorted({r.plan.story for r in results})
    figures = {"seed": seed, **summary(results),
               "per story": {s: summary(r for r in results if r.plan.story == s)
                             for s in stories}}
    return json.dumps({"chaos": figures})


def to_json(result: Result) -> str:
    return json.dumps(asdict(result))


def from_json(line: str) -> Result:
    fields = json.loads(line)
    return Result(**{**fields, "plan": Plan(**fields["plan"])})

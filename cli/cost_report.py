"""``orch cost-report``: what each cluster and managed job has cost, as `sky cost-report`
shows: hours up × the catalog's price (see ``orch.cost`` for what is counted)."""

from __future__ import annotations

from rich.table import Table

from cli.app import AsJson, app, console, run
from cli.display import ago, duration
from orch.client.usage import cost_report
from orch.cost import CostReport


def money(amount: float | None) -> str:
    return "-" if amount is None else f"$ {amount:,.2f}"


def cost_table(report: CostReport) -> None:
    if not report.lines:
        console.print("No clusters or managed jobs to report.")
        return
    table = Table(show_edge=False, box=None, header_style="bold")
    for column in ("NAME", "KIND", "LAUNCHED", "DURATION", "RESOURCES", "STATUS", "$/H",
                   "COST"):
        table.add_column(column, justify="right" if column in ("$/H", "COST") else "left")
    for line in report.lines:
        table.add_row(line.name, line.kind, ago(line.launched_at), duration(line.hours * 3600),
                      line.resources or "-", line.status, money(line.price_per_hour),
                      money(line.cost))
    console.print(table)
    unpriced = (f" ({report.unpriced} not in the catalog, left out)"
                if report.unpriced else "")
    console.print(f"Total: {money(report.total)}{unpriced}. Hours up × catalog price; "
                  "stopped time is not billed.", highlight=False)


@app.command("cost-report")
def cost_report_command(as_json: AsJson = False) -> None:
    """Estimated cost of every cluster (torn-down ones too) and managed job, with a total.

    Torn-down clusters and ended jobs are read from the server's closed workflows, kept
    for its namespace retention (the embedded server's: 24 h)."""
    report = run(cost_report)
    if as_json:
        print(report.model_dump_json())
    else:
        cost_table(report)

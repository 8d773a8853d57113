"""``tokenmill status``: where a run stands, from another terminal, while it runs or after."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click


@click.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
def status(out: str, as_json: bool) -> None:
    """Show the summary table of the run in OUT: prompts, servers, decode tok/s (aggregate and per GPU),
    client completions/s and effective tok/s, ETA or elapsed, failures and the binding resource.

    Reads the output directory and its event log only; safe while `tokenmill run` is writing to OUT.
    """
    from tokenmill.report.status import read_status, status_text

    st = read_status(Path(out))
    if as_json:
        data = {"state": st.state, "age_s": round(st.age_s, 1), **dataclasses.asdict(st.summary)}
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(status_text(st))

"""``tokenmill status``: where a run stands, from another terminal, while it runs or after."""

from __future__ import annotations

import dataclasses
import json

import click


@click.command()
@click.argument("target", metavar="OUT | PREFIX")
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
def status(target: str, as_json: bool) -> None:
    """Show the summary table of the run in OUT: prompts, servers, decode tok/s (aggregate and per GPU),
    client completions/s and effective tok/s, ETA or elapsed, failures and the binding resource. A split run's
    partitions are shown as one job.

    Reads the output directory and its event log only; safe while `tokenmill run` is writing to OUT. Given the
    job's remote PREFIX (s3://..., with credentials in the environment as for the run), it shows the whole job
    from the prefix alone, from any machine (as of the copies the clients make every upload.side_interval_s).

    \b
    Example:
        tokenmill status out/
        tokenmill status s3://bucket/corpora/run-1/
    """
    from tokenmill.report.status import read_status, status_text
    from tokenmill.storage.place import open_place, records_dir

    place = open_place(target)
    with records_dir(place) as view:
        st = read_status(view.root, recorded=view.recorded)
    if place.remote:
        st.summary.output_dir = view.shown
    if as_json:
        data = {"state": st.state, "age_s": round(st.age_s, 1), **dataclasses.asdict(st.summary)}
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(status_text(st))

"""``tokenmill serve``: the live page of a run, from its output directory or the whole job at its remote prefix."""

from __future__ import annotations

import click


@click.command()
@click.argument("target", metavar="OUT | PREFIX")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless you mean it).")
@click.option("--no-samples", is_flag=True, help="Leave out the sample viewer (it reads every shard once).")
@click.option("--refresh", "refresh_s", default=30.0, show_default=True, type=click.FloatRange(min=1),
              help="For a PREFIX: seconds between two fetches of the job's copies.")  # fmt: skip
def serve(target: str, port: int, host: str, no_samples: bool, refresh_s: float) -> None:
    """Serve the run's live page (what its --metrics-port serves at /) for the run in OUT, finished or still going
    on: progress and ETA, throughput and ETA over time, the fleet and its pools, the doctor's verdicts, uploads,
    failures, and recent answers with their quality flags and the worst by each signal.

    Given the job's remote PREFIX (s3://..., credentials in the environment as for the run), the page shows the
    whole job, every partition's event log as one and a table of the partitions, fetched again every --refresh.

    \b
    Example:
        tokenmill serve out/ --port 8765     # then open http://127.0.0.1:8765/
        tokenmill serve s3://bucket/corpora/run-1/
    """
    from tokenmill.observe.serve import PageSource, make_server
    from tokenmill.storage.place import open_place, records_dir, refetch

    place = open_place(target)
    corpus = None if no_samples else target
    with records_dir(place) as records:
        if place.store is not None:
            store = place.store

            def again() -> tuple[int, int]:
                return refetch(store, records.root)

            source = PageSource(records.root, place.shown, corpus, again, records.recorded, refresh_s)
        else:
            source = PageSource(records.root, str(records.root.absolute()), corpus)
        try:
            server = make_server(source, host, port)
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve on {host}:{port} ({exc.strerror or exc}); choose another --port"
            ) from exc
        click.echo(f"serving the page of {source.title} at http://{host}:{server.server_port}/ (Ctrl-C to stop)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            click.echo("stopped")
        finally:
            server.server_close()

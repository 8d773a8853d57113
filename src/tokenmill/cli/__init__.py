"""The ``tokenmill`` command: one thin module per command group, docstrings are the help text."""

from __future__ import annotations

import importlib
import sys

import click

from tokenmill.errors import TokenmillError

# command name -> module under tokenmill.cli exposing a click command called like the command
# ("module:attribute" where the attribute has another name)
_COMMANDS = {
    "run": "run",
    "verify": "verify",
    "retry-failed": "run",
    "sim": "sim",
    "demo": "demo",
    "plan": "plan",
    "calibrate": "calibrate",
    "doctor": "doctor",
    "report": "report",
    "status": "status",
    "fleet": "fleet",
    "export": "export:export_cmd",
    "inspect": "inspect:inspect_cmd",
    "regenerate": "regenerate",
    "scrape-config": "scrape:scrape_config",
    "serve": "serve",
}


class _Lazy(click.Group):
    """Imports each command's module only when it is used (fast --help, small import cost)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = _COMMANDS.get(name)
        if target is None:
            return None
        mod_name, _, attr = target.partition(":")
        mod = importlib.import_module(f"tokenmill.cli.{mod_name}")
        cmd = getattr(mod, attr or name.replace("-", "_"))
        assert isinstance(cmd, click.Command)
        return cmd


@click.group(cls=_Lazy)
@click.version_option(package_name="tokenmill")
def cli() -> None:
    """tokenmill: every prompt answered exactly once by a fleet of inference servers."""


def main() -> None:
    """Console entry point: TokenmillError becomes a clear message and exit code 2, never a traceback."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except TokenmillError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted; rerun the same command to resume", err=True)
        sys.exit(130)

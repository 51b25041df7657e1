"""`headsearch serve`: the web app (thin: options, safety checks, the server)."""
from __future__ import annotations

from pathlib import Path

import click

from cli.options import library_option, library_path
from headsearch.basics.errors import HeadsearchError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@click.command()
@library_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on; anything but the loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--token", default=None, envvar="HEADSEARCH_TOKEN", help="Secret every request must carry (needed off the loopback).")
@click.option("--cache", "cache_dir", type=click.Path(path_type=Path), default=None,
              help="Folder for preview clips and frames (default: ~/.cache/headsearch/serve/<library>).")
def serve(library: Path | None, host: str, port: int, token: str | None, cache_dir: Path | None) -> None:
    """Search, watch and browse the library in a browser."""
    import uvicorn

    from serve.app import create_app

    local = host in LOOPBACK
    if not local and not token:
        raise HeadsearchError(f"--host {host} makes the library reachable from other machines: give --token SECRET too")
    app = create_app(library_path(library), token=token, cache_dir=cache_dir,
                     allowed_hosts=(LOOPBACK | {host}) if local else None)
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    if not local:
        click.echo(f"warning: serving {app.state.site.root} to every machine that can reach {host}:{port}; "
                   "anyone with the token can see every video in it", err=True)
    click.echo(f"headsearch: {address}  (library {app.state.site.root}; Ctrl+C stops)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")

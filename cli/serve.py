"""`headsearch serve`: the web app (thin: options, safety checks, the server)."""
from __future__ import annotations

from pathlib import Path

import click

from cli.options import library_option, library_path

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# What is true of a server stopped (not the interrupted commands' "run the same command again to finish"): the changes
# made through it were committed as each was made; the jobs it ran (redactions, comparisons), finished or not, went with it.
STOPPED = ("interrupted: the server stopped; changes made in the app are in the library, its jobs (redactions, comparisons) "
           "and their files are gone (`headsearch serve` starts it again)")


@click.command()
@library_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on; anything but the loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option("--token", default=None, envvar="HEADSEARCH_TOKEN", help="Secret every request must carry, at least 16 characters (off the loopback without one, `serve` makes one).")
@click.option("--cache", "cache_dir", type=click.Path(path_type=Path), default=None,
              help="Folder for preview clips and frames (default: ~/.cache/headsearch/serve/<library>).")
@click.pass_context
def serve(ctx: click.Context, library: Path | None, host: str, port: int, token: str | None, cache_dir: Path | None) -> None:
    """Search, watch and browse the library in a browser."""
    import logging

    import uvicorn

    from serve.app import create_app
    from serve.guard import checked_token, strong_token
    from serve.server import server_config

    local = host in LOOPBACK
    token = checked_token(token)
    made = not local and token is None
    if made:  # reachable from other machines: never without a token
        token = strong_token()
    app = create_app(library_path(library), token=token, cache_dir=cache_dir,
                     allowed_hosts=(LOOPBACK | {host}) if local else None)
    listening = _bound(host, port)  # before the address is printed: a busy port is one line, not an address and a traceback
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    if not local:
        click.echo(f"warning: serving {app.state.site.root} to every machine that can reach {host}:{port}; "
                   "anyone with the token can see every video in it" + (" (a token was made for this run: it is in the address)"
                                                                         if made else ""), err=True)
    click.echo(f"headsearch: {address}  (library {app.state.site.root}; Ctrl+C stops)", err=True)
    # wrong tokens are said whatever the verbosity; -v adds a line per request
    logging.getLogger("serve.guard").setLevel(logging.INFO if ctx.meta.get("verbose") else logging.WARNING)
    try:
        uvicorn.Server(server_config(app, host, port)).run(sockets=[listening])
    except KeyboardInterrupt:  # uvicorn stops at Ctrl+C (or a SIGTERM), then raises it again: nothing is left to finish
        from cli.main import _interrupted

        _interrupted(STOPPED)


def _bound(host: str, port: int):
    """A socket bound to host:port for the server; one line when that address cannot be had (a busy port)."""
    import socket

    from headsearch.basics.errors import HeadsearchError

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        raise HeadsearchError(f"{host}:{port}: cannot serve there ({e.strerror or e})") from e
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise HeadsearchError(f"{host}:{port}: cannot serve there ({e.strerror or e}): another program may use the port "
                              "(`--port N` picks another)") from e
    return sock

"""`paratune serve`: the MCP server (tool belt, resources, prompt) over stdio or streamable HTTP."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from paratune.oracle.errors import InputError
from paratune.oracle.inputs.primus_tree import PRIMUS_ROOT_ENV

from .search_args import add_search_arguments, constraints_from_args, with_search_args
from .workload_args import add_primus_root


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("serve", help="MCP server: the oracle as a tool belt over stdio or streamable HTTP")
    p.add_argument("--workload", help="workload YAML: with --target-cluster, opens (or resumes) a default run")
    p.add_argument("--target-cluster", help="target cluster YAML (with --workload)")
    add_primus_root(p)
    p.add_argument("--ledger", default="paratune-ledger.sqlite", help="ledger file (default: %(default)s)")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default: %(default)s")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default: %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (default: %(default)s)")
    p.add_argument("--allow-root", action="append", metavar="DIR",
                   help="folder tools may read and write under (repeatable; default: the current directory)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="another name clients reach the HTTP server by (repeatable; a proxy's, a DNS alias); "
                        "requests with any other Host header are refused")
    p.add_argument("--token", help="HTTP bearer token; prefer env PARATUNE_MCP_TOKEN (a flag shows in `ps`); "
                                    "required off loopback")
    p.add_argument("--log-level", default="WARNING", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="stderr log level, any case (default: %(default)s)")
    add_search_arguments(p)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from paratune.server.bind import check_bind

    if args.token:
        print("paratune serve: warning: --token is visible to every user in `ps`; set PARATUNE_MCP_TOKEN instead",
              file=sys.stderr)
    args.token = args.token or os.environ.get("PARATUNE_MCP_TOKEN")

    if bool(args.workload) != bool(args.target_cluster):
        raise InputError("give both --workload and --target-cluster, or neither (then open_run creates a run)")
    if args.transport == "http":
        check_bind(args.host, args.token)
    from paratune.ledger import (
        Ledger,  # the server's imports (the MCP SDK) load only once the arguments are sound
    )
    from paratune.ledger.keyguard import mask_logs
    from paratune.server.app import build_server
    from paratune.server.paths import AllowedRoots
    from paratune.server.session import Session
    from paratune.server.transport import serve_http, serve_stdio

    mask_logs()
    if args.primus_root:  # every workload the server reads (open_run) finds Primus's configs there
        os.environ[PRIMUS_ROOT_ENV] = args.primus_root
    roots = AllowedRoots(args.allow_root or [Path.cwd()])
    constraints_from_args(args)  # bad flags fail here, before the server starts
    with Ledger(args.ledger) as ledger:
        session = Session(ledger, roots, lambda cluster: with_search_args(cluster, args))
        if args.workload:
            session.open_run(Path(args.workload), Path(args.target_cluster), confined=False)
        server = build_server(session, log_level=args.log_level)
        if args.transport == "stdio":
            serve_stdio(server)
        else:
            serve_http(server, host=args.host, port=args.port, token=args.token, log_level=args.log_level,
                       allowed_hosts=args.allow_host)
    return 0

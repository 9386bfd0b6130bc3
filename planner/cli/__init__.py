"""The `paratune` command line: one sub-command module per verb."""

from __future__ import annotations

import argparse
import os
import sys

from paratune.oracle.errors import InputError

from ..llm.selection import offline_litellm
from . import catalog, explain, measure, project, serve, tune


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paratune", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    project.register(verbs)
    catalog.register(verbs)
    explain.register(verbs)
    measure.register(verbs)
    tune.register(verbs)
    serve.register(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; bad input is one line on stderr and exit 2, never a traceback."""
    offline_litellm()  # before anything imports LiteLLM (DSPy does): its price table is bundled, never fetched
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except InputError as exc:
        print(f"paratune: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of ours: say so in one line unless debugging
        if os.environ.get("PARATUNE_DEBUG"):
            raise
        print(f"paratune: internal error: {type(exc).__name__}: {exc} (set PARATUNE_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The bodies of lastcall's commands and their parsers, one module per concern; harness.cli puts them together
behind its one error boundary.  Each module's ``register(sub, fmt)`` adds its subcommands to build_parser's
subparsers action, each setting ``func`` to its command."""

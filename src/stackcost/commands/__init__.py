"""One module per subcommand: each has `add_parser(subparsers)` and `run(args, console)`."""

"""The `irsurgeon` console entry point: a Ctrl-C that lands while the CLI is still importing is a one-line error too."""
import sys


def run() -> None:
    try:
        from irsurgeon.cli import main
    except KeyboardInterrupt:
        print("Error: interrupted", file=sys.stderr)
        sys.exit(130)
    main()

from irsurgeon.cli import main

main()

"""The `placeto` command line: parse, call the libraries, print."""

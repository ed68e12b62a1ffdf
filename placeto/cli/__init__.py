"""The `placeto` command line: parses arguments, calls the libraries, prints."""

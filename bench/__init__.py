"""specops benchmarks: `python -m bench --help`."""

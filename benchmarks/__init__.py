"""asv's benchmark_dir: the benchmarks are generated from an ampsuite suite file (see cells.py and README.md)."""

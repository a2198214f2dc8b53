"""The parts the benchmark scripts share: their inputs (cases.py), the engines they compare (engines.py),
the measurements of the encoder benchmark (jobs.py), the subprocess protocol of every script that measures
in a worker process (worker.py), the machine's ceilings and the process's memory (probes.py) and the
encoder benchmark's report (report.py). The scripts in benchmarks/ are the entry points; each puts
benchmarks/ on the path by being run from there."""

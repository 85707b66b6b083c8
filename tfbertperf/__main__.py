from tfbertperf.cli import entry

entry()

"""The parts tfbertperf/job.py composes a run from (rank: above the stages, below job.py; none imports job.py):
training.py (the real model or emulated devices, with the host sampler's marks), hostsampling.py (the host
utilization sampler and its report block), inputceiling.py (the pipeline alone after training, and the demand it
is compared with), regime_report.py (what the accelerator regime adds to report.json, and the verdict's inputs
known before the verdict is made)."""

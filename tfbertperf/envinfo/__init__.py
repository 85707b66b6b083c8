"""Pieces of the environment fingerprint (`tfbertperf.env` is the facade: fingerprint, diff, main).

- collect.py       what this machine is: Python/OS, packages, TF build, devices, CPU, memory, threads, oneDNN,
                   XLA, precision, determinism, env vars, cloud/container hints — local reads only
- datalocation.py  where the data is: filesystem type of a path (local / network / fuse / memory) and a short,
                   bounded read-latency and throughput probe; scheme/bucket/emulator for gs:// and az://
- diffing.py       two fingerprints (or reports) → differences ranked by likely impact on speed and numerics
"""

#!/usr/bin/env python3
"""Fault-injecting loopback proxy in front of a storage emulator (latency, bandwidth cap, 503s, resets).

    python tools/faultproxy.py --upstream http://127.0.0.1:10000 --latency-ms 20 --error-rate 0.05

Same as `python -m tfbertperf.testing.proxy`; see tfbertperf/testing/proxy.py.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfbertperf.testing.proxy import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

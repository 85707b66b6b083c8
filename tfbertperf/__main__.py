import sys

from tfbertperf.cli import main

sys.exit(main())

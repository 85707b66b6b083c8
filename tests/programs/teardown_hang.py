"""A command that fails while a tf.data map is inside a Python call (tests/test_exit.py).

    python tests/programs/teardown_hang.py          # errors.process_main: one line, exit 2
    python tests/programs/teardown_hang.py plain    # sys.exit(main()): hangs in the iterator's destructor
"""

import sys
import time

import tensorflow as tf

from tfbertperf.errors import UsageError, cli_entry, process_main


def slow(x):
    time.sleep(1.0)
    return x


@cli_entry
def main():
    ds = tf.data.Dataset.range(100).map(lambda x: tf.py_function(slow, [x], tf.int64), num_parallel_calls=2)
    global it  # alive until Python's teardown, as a failed run's iterator is (held by the traceback)
    it = iter(ds)
    next(it)
    raise UsageError("shard x: corrupt TFRecord at byte 12")


if sys.argv[1:] == ["plain"]:
    sys.exit(main())
process_main(main)

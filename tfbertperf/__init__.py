"""tfbertperf — where does my BERT training step's time go?

A real Keras BERT training loop on a tf.data pipeline, profiled with tf.profiler and attributed to storage I/O,
preprocessing, compute and host→device transfer.  See README.md and shared/DESIGN.md.
"""

__version__ = "0.1.0"

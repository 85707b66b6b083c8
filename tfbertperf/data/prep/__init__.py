"""The write side of the data stage: every data set — pretraining data from the bundled text, `data.corpus` or
`prepare --corpus` (files, folders, gs://, az://), classification data, synthetic shards of any size — is made
here, by one path:

    source.py            the one streamed corpus reader (and the corpus's identity, source_sha256)
    chunked.py           the chunked parallel maker (tokenize here, instances in worker processes; 1 = in process)
    instances.py         one chunk → instances → masked → its shards (a worker's job; no TensorFlow)
    encode.py            the one record encoder (tf.train.Example bytes) and its TFRecord framing
    labeled.py           classification rows → records
    synthetic_shards.py  random records in the pretraining spec at any size
    output.py            the output directory, shard names, the one manifest writer, temp-dir-then-upload
    make.py              prepare_data: the entry (job.ensure_data and `tfbertperf prepare` call it)

The read side sits beside it in data/: features (the on-disk spec), manifest, pipeline, ceiling.  Files are
written through storage/atomic.py.
"""

from tfbertperf.data.prep.make import prepare_data  # noqa: F401

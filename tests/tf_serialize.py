"""The reference the record encoder (tfbertperf/data/prep/encode.py) is held to: TensorFlow's own
tf.train.Example serialization (deterministic map order), written here, not imported from the package."""


def tf_serialize(values: dict) -> bytes:
    """{name: bytes | list of float | list of int} → serialized tf.train.Example (deterministic)."""
    from tensorflow.core.example import example_pb2, feature_pb2

    feats = {}
    for k, v in values.items():
        if isinstance(v, bytes):
            feats[k] = feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=[v]))
        elif len(v) and isinstance(v[0], float):
            feats[k] = feature_pb2.Feature(float_list=feature_pb2.FloatList(value=v))
        else:
            feats[k] = feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=v))
    return example_pb2.Example(features=feature_pb2.Features(feature=feats)).SerializeToString(deterministic=True)

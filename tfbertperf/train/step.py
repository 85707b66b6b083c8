"""The compiled train step and how batches reach it under a tf.distribute strategy."""

from __future__ import annotations


def losses(task: str, num_replicas: int):
    """loss_fn(outputs, batch) -> (loss, accuracy) for one replica.

    pretrain: MLM cross-entropy averaged over masked positions weighted by masked_lm_weights (as in
      google-research/bert: Σ w·ce / (Σ w + 1e-5)) + NSP cross-entropy averaged over the batch;
      accuracy = weighted MLM accuracy.
    classify: cross-entropy over the batch; accuracy = label accuracy.
    Each replica's loss is divided by the replica count so that the all-reduced (summed) gradient is the mean.
    """
    import tensorflow as tf

    def pretrain(out, batch):
        ids = tf.cast(batch["masked_lm_ids"], tf.int32)  # (B, P)
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)  # (B, P)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=out["mlm_logits"])  # (B, P)
        denom = tf.reduce_sum(weights) + 1e-5
        mlm = tf.reduce_sum(ce * weights) / denom
        nsp_labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])  # (B,)
        nsp = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nsp_labels, logits=out["nsp_logits"])
        )
        hits = tf.cast(tf.equal(tf.argmax(out["mlm_logits"], -1, output_type=tf.int32), ids), tf.float32)
        acc = tf.reduce_sum(hits * weights) / denom
        return (mlm + nsp) / num_replicas, acc

    def classify(out, batch):
        labels = tf.reshape(tf.cast(batch["label_ids"], tf.int32), [-1])  # (B,)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=out["logits"])
        hits = tf.cast(tf.equal(tf.argmax(out["logits"], -1, output_type=tf.int32), labels), tf.float32)
        return tf.reduce_mean(ce) / num_replicas, tf.reduce_mean(hits)

    return pretrain if task == "pretrain" else classify


def make_train_step(model, optimizer, strategy, task: str, jit: bool = False):
    """The compiled train step: batch (global, or distributed PerReplica) -> float32 tensor [loss, accuracy].

    loss is the global mean loss; accuracy the mean over replicas. Gradients are all-reduced by the Keras
    optimizer inside `strategy.run`; mixed_float16 loss scaling is the LossScaleOptimizer's scale_loss/apply.
    """
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    loss_fn = losses(task, replicas)
    input_names = model.feature_names

    def replica_step(batch):
        inputs = {k: tf.cast(batch[k], tf.int32) for k in input_names}
        with tf.GradientTape() as tape:
            out = model(inputs, training=True)
            loss, acc = loss_fn(out, batch)
            scaled = optimizer.scale_loss(loss)
        variables = model.trainable_variables
        grads = tape.gradient(scaled, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss, acc

    if replicas == 1 and strategy is tf.distribute.get_strategy():
        # Default strategy: no replica machinery, the step itself is the (optionally XLA) function.
        @tf.function(jit_compile=jit)
        def step(batch):
            loss, acc = replica_step(batch)
            return tf.stack([loss, acc])

        return step

    inner = tf.function(replica_step, jit_compile=jit) if jit else replica_step

    @tf.function
    def step(batch):
        loss, acc = strategy.run(inner, args=(batch,))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
        acc = strategy.reduce(tf.distribute.ReduceOp.MEAN, acc, axis=None)
        return tf.stack([loss, acc])

    return step


def distribute(strategy, dataset_fn, global_batch: int, per_replica: int):
    """An iterable of batches for `strategy`: the pipeline's own for the default strategy, else one input
    pipeline per worker (`distribute_datasets_from_function`) rebatched to the per-replica size.

    `rebatch(per_replica)` is exact whether `dataset_fn(ctx)` yields global batches (the agreed contract) or
    already per-replica ones: consecutive per-replica slices go to the local replicas in turn.
    """
    import tensorflow as tf

    if strategy is tf.distribute.get_strategy():
        return dataset_fn(None)

    def per_worker(ctx):
        ds = dataset_fn(ctx)
        return ds.rebatch(per_replica, drop_remainder=True) if per_replica != global_batch else ds

    return strategy.distribute_datasets_from_function(per_worker)

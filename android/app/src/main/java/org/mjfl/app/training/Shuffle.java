package org.mjfl.app.training;

/**
 * The round's batches (docs/models.md, "The round"): every epoch the task generator's
 * permutation of the shard ({@link TaskRandom#permutation}), cut into consecutive batches of
 * {@code batch_size}, the last one shorter when {@code batch_size} does not divide {@code n}.
 */
public final class Shuffle {
    private Shuffle() {}

    /** Batches per epoch: ceil(n / batchSize). */
    public static int batchesPerEpoch(int n, int batchSize) {
        return (n + batchSize - 1) / batchSize;
    }

    /** Samples in batch {@code b} of an epoch: batchSize, or what is left for the last one. */
    public static int batchLength(int n, int batchSize, int b) {
        return Math.min(batchSize, n - b * batchSize);
    }
}

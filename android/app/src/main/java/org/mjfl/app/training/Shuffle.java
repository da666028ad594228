package org.mjfl.app.training;

import java.util.SplittableRandom;

/**
 * The round's sample order (docs/models.md, "The round"): every epoch a fresh uniformly random
 * permutation of the shard, cut into consecutive batches of {@code batch_size}, the last one
 * shorter when {@code batch_size} does not divide {@code n}. The generator is the device's own.
 */
public final class Shuffle {
    private Shuffle() {}

    /** A uniformly random permutation of 0..n-1 (Fisher-Yates, Knuth 3.4.2 Algorithm P). */
    public static int[] permutation(int n, SplittableRandom rng) {
        int[] p = new int[n];
        for (int i = 0; i < n; i++) {
            p[i] = i;
        }
        for (int i = n - 1; i > 0; i--) {
            int j = rng.nextInt(i + 1);
            int t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
        return p;
    }

    /** Batches per epoch: ceil(n / batchSize). */
    public static int batchesPerEpoch(int n, int batchSize) {
        return (n + batchSize - 1) / batchSize;
    }

    /** Samples in batch {@code b} of an epoch: batchSize, or what is left for the last one. */
    public static int batchLength(int n, int batchSize, int b) {
        return Math.min(batchSize, n - b * batchSize);
    }
}

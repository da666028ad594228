package org.mjfl.app.training;

import java.nio.FloatBuffer;

/**
 * The task generator (docs/models.md, "The task generator"): a task's batch order and dropout
 * noise from its seed, the same numbers on every device and in mjfl's Python trainers
 * ({@code mjfl/jobs/randomness.py}; test vectors in {@code tests/golden/randomness.json}).
 *
 * <p>Counter-based SplitMix64: each number is one formula of (key, index), on unsigned 64-bit
 * integers modulo 2^64 (Java's wrapping {@code long} arithmetic with {@code >>>}):
 * <pre>
 *   draw(key, i) = mix(key + (i + 1) * GAMMA)
 *   ORDER = draw(seed, 0), NOISE = draw(seed, 1)
 *   epoch e's order: 0..n-1 sorted by draw(draw(ORDER, e), j), unsigned, ties by j
 *   noise value c (one running counter per task): (draw(NOISE, c) >>> 40) * 2^-24
 * </pre>
 *
 * <p>{@link #fillNoise} draws from the task's single counter, so calls must follow the training
 * contract's order: step after step, and within a step the dropout sites in the program's input
 * order. One thread at a time.
 */
public final class TaskRandom {
    /** Seeds are 0..2^63-1: the protocol's {@code seed}, a signed 64-bit integer on every platform. */
    public static final long MAX_SEED = Long.MAX_VALUE;

    private static final long GAMMA = 0x9E3779B97F4A7C15L;

    private final long seed;
    private final long order;
    private final long noise;
    private long counter;

    /** @throws IllegalArgumentException for a seed outside [0, 2^63) */
    public TaskRandom(long seed) {
        if (seed < 0) {
            throw new IllegalArgumentException("a task seed must be in [0, 2^63), got " + seed);
        }
        this.seed = seed;
        this.order = draw(seed, 0);
        this.noise = draw(seed, 1);
    }

    public long seed() {
        return seed;
    }

    /** SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014). */
    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** SplitMix64's (i+1)-th output from state {@code key}; {@code index} is read as unsigned. */
    static long draw(long key, long index) {
        return mix(key + (index + 1) * GAMMA);
    }

    long orderKey() {
        return order;
    }

    long noiseKey() {
        return noise;
    }

    /** Noise values drawn so far: the counter of the next one. */
    public long noiseDrawn() {
        return counter;
    }

    /** Epoch {@code epoch}'s order of 0..n-1: by increasing unsigned key, ties by the smaller index. */
    public int[] permutation(long epoch, int n) {
        long e = draw(order, epoch);
        long[] keys = new long[n];
        int[] idx = new int[n];
        for (int j = 0; j < n; j++) {
            keys[j] = draw(e, j);
            idx[j] = j;
        }
        sortByKey(idx, keys);
        return idx;
    }

    /** Fills {@code out} from its position to its limit with the next noise values, in order. */
    public void fillNoise(FloatBuffer out) {
        while (out.hasRemaining()) {
            out.put(nextNoise());
        }
    }

    /** The next noise value: 24 random bits as a float32 in [0, 1), exactly. */
    public float nextNoise() {
        return (int) (draw(noise, counter++) >>> 40) * 0x1.0p-24f;
    }

    /**
     * Sorts {@code idx} by {@code keys[idx]} compared unsigned, stably (a merge sort: equal keys
     * keep their order, so the smaller index first as the generator says).
     */
    private static void sortByKey(int[] idx, long[] keys) {
        int n = idx.length;
        int[] from = idx;
        int[] to = new int[n];
        for (int width = 1; width < n; width *= 2) {
            for (int lo = 0; lo < n; lo += 2 * width) {
                int mid = Math.min(lo + width, n);
                int hi = Math.min(lo + 2 * width, n);
                int a = lo;
                int b = mid;
                for (int k = lo; k < hi; k++) {
                    if (a < mid && (b >= hi || Long.compareUnsigned(keys[from[a]], keys[from[b]]) <= 0)) {
                        to[k] = from[a++];
                    } else {
                        to[k] = from[b++];
                    }
                }
            }
            int[] t = from;
            from = to;
            to = t;
        }
        if (from != idx) {
            System.arraycopy(from, 0, idx, 0, n);
        }
    }
}

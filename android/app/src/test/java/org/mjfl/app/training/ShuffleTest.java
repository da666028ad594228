package org.mjfl.app.training;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class ShuffleTest {
    @Test
    void everyEpochIsAPermutation() {
        SplittableRandom rng = new SplittableRandom(1);
        for (int n : new int[] {1, 2, 7, 100, 1000}) {
            int[] p = Shuffle.permutation(n, rng);
            int[] sorted = p.clone();
            Arrays.sort(sorted);
            for (int i = 0; i < n; i++) {
                assertEquals(i, sorted[i]);
            }
        }
    }

    @Test
    void permutationsAreFreshAndUniform() {
        SplittableRandom rng = new SplittableRandom(2);
        int n = 4;
        int trials = 48_000;
        int[][] counts = new int[n][n];
        int[] previous = null;
        int repeats = 0;
        for (int t = 0; t < trials; t++) {
            int[] p = Shuffle.permutation(n, rng);
            for (int i = 0; i < n; i++) {
                counts[i][p[i]]++;
            }
            if (Arrays.equals(p, previous)) {
                repeats++;
            }
            previous = p;
        }
        // Each of the 24 orders follows another with probability 1/24.
        assertTrue(repeats < trials / 24 * 1.2, "repeats " + repeats);
        for (int[] row : counts) {
            for (int c : row) {
                // expectation 12000, standard deviation ~95
                assertTrue(Math.abs(c - trials / n) < 600, "count " + c);
            }
        }
        assertNotEquals(Arrays.toString(Shuffle.permutation(50, rng)), Arrays.toString(Shuffle.permutation(50, rng)));
    }

    @Test
    void batchesCoverTheShardWithAShortLastOne() {
        for (int n : new int[] {1, 5, 32, 33, 100}) {
            for (int bs : new int[] {1, 3, 32, 256}) {
                int batches = Shuffle.batchesPerEpoch(n, bs);
                int total = 0;
                for (int b = 0; b < batches; b++) {
                    int len = Shuffle.batchLength(n, bs, b);
                    assertTrue(len >= 1 && len <= bs);
                    if (b < batches - 1) {
                        assertEquals(bs, len);
                    }
                    total += len;
                }
                assertEquals(n, total);
                assertEquals(n % bs == 0 ? bs : n % bs, Shuffle.batchLength(n, bs, batches - 1));
            }
        }
    }
}

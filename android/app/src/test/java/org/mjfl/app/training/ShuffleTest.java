package org.mjfl.app.training;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class ShuffleTest {
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

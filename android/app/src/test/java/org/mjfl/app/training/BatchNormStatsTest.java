package org.mjfl.app.training;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class BatchNormStatsTest {
    private static float bits(int b) {
        return Float.intBitsToFloat(b);
    }

    @Test
    void matchesThePythonTrainerBitForBit() {
        // Expected bits from mjfl's ExecuTorchTrainer._update_running (numpy float32) with
        // N = 3, pixels = 4 (count 12), momentum 0.1.
        float[][] mean = {{0.5f, -1.25f, 3.0f}};
        float[][] var = {{1.0f, 0.3f, 2.5f}};
        double[] tracked = {7};
        BatchNormStats s = new BatchNormStats(mean, var, tracked, new long[] {4});
        s.update(0, new float[] {0.1f, 0.7f, -2.0f}, new float[] {0.9f, 0.05f, 4.0f}, 3);
        assertArrayEquals(new float[] {bits(0x3eeb851e), bits(0xbf870a3d), bits(0x401fffff)}, s.runningMean(0));
        assertArrayEquals(new float[] {bits(0x3f7f88d8), bits(0x3e8d0861), bits(0x402bed62)}, s.runningVar(0));
        assertEquals(8.0, s.tracked(0));
    }

    @Test
    void usesTheUnbiasedVarianceOfAllNormalisedValues() {
        // From running 0 with batch variance v: running = 0.1 * v * c / (c - 1), c = N * pixels.
        for (int n : new int[] {1, 2, 5, 32}) {
            for (long pixels : new long[] {1, 16, 1024}) {
                BatchNormStats s = new BatchNormStats(new float[][] {{0f}}, new float[][] {{0f}}, new double[] {0},
                        new long[] {pixels});
                s.update(0, new float[] {2f}, new float[] {1f}, n);
                long c = n * pixels;
                double expected = c == 1 ? 0.1 : 0.1 * c / (c - 1.0);
                assertEquals(expected, s.runningVar(0)[0], 1e-7, "N=" + n + " pixels=" + pixels);
                assertEquals(0.2, s.runningMean(0)[0], 1e-7);
            }
        }
    }

    @Test
    void layersUpdateIndependently() {
        BatchNormStats s = new BatchNormStats(new float[][] {{1f}, {1f, 1f}}, new float[][] {{1f}, {1f, 1f}},
                new double[] {0, 0}, new long[] {1, 1});
        s.update(1, new float[] {0f, 0f}, new float[] {1f, 1f}, 2);
        assertArrayEquals(new float[] {1f}, s.runningMean(0));
        assertEquals(0.0, s.tracked(0));
        assertEquals(1.0, s.tracked(1));
        assertThrows(IllegalArgumentException.class, () -> s.update(0, new float[] {0f, 0f}, new float[] {1f, 1f}, 2));
    }
}

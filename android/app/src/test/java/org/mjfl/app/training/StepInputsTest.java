package org.mjfl.app.training;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.List;
import org.junit.jupiter.api.Test;

class StepInputsTest {
    @Test
    void gathersTheBatchInOrderWithNoiseBatchLast() {
        // 5 samples of shape [2, 1]: sample i holds (10i, 10i + 1), label 100 + i.
        float[] x = new float[10];
        long[] y = new long[5];
        for (int i = 0; i < 5; i++) {
            x[2 * i] = 10 * i;
            x[2 * i + 1] = 10 * i + 1;
            y[i] = 100 + i;
        }
        StepInputs in = new StepInputs(new long[] {2, 1}, List.of(new long[] {3, 2}, new long[] {4}));
        int[] order = {4, 0, 3, 1, 2};
        Batch b = in.fill(x, y, order, 1, 3, new TaskRandom(3));
        assertEquals(3, b.size());
        assertArrayEquals(new long[] {3, 2, 1}, b.xShape());
        assertArrayEquals(new long[] {3}, b.yShape());
        assertArrayEquals(new long[] {3, 2, 3}, b.noiseShapes().get(0));
        assertArrayEquals(new long[] {4, 3}, b.noiseShapes().get(1));
        float[] xs = new float[6];
        b.x().duplicate().get(xs);
        assertArrayEquals(new float[] {0, 1, 30, 31, 10, 11}, xs);
        long[] ys = new long[3];
        b.y().duplicate().get(ys);
        assertArrayEquals(new long[] {100, 103, 101}, ys);
        // What ExecuTorch's Tensor.fromBlob checks: direct, native order, capacity = numel.
        assertTrue(b.x().isDirect() && b.y().isDirect());
        assertEquals(ByteOrder.nativeOrder(), b.x().order());
        assertEquals(6, b.x().capacity());
        assertEquals(18, b.noise().get(0).capacity());
        assertEquals(12, b.noise().get(1).capacity());
    }

    @Test
    void noiseContinuesTheTasksCounterSiteAfterSiteInCOrder() {
        StepInputs in = new StepInputs(new long[] {1}, List.of(new long[] {2}, new long[] {3}));
        TaskRandom random = new TaskRandom(5);
        TaskRandom expected = new TaskRandom(5);
        float[] x = {0, 1};
        long[] y = {0, 1};
        for (int step = 0; step < 2; step++) {
            Batch b = in.fill(x, y, new int[] {1, 0}, 0, 2, random);
            for (FloatBuffer site : b.noise()) {
                float[] want = new float[site.remaining()];
                for (int i = 0; i < want.length; i++) {
                    want[i] = expected.nextNoise();
                }
                assertArrayEquals(want, values(site), "step " + step);
            }
        }
        assertEquals(2 * (4 + 6), random.noiseDrawn());
    }

    @Test
    void keepsOneSetOfBuffersPerBatchSize() {
        StepInputs in = new StepInputs(new long[] {1}, List.of());
        float[] x = {1, 2, 3};
        long[] y = {0, 1, 0};
        Batch full = in.fill(x, y, new int[] {0, 1, 2}, 0, 2, new TaskRandom(1));
        Batch last = in.fill(x, y, new int[] {0, 1, 2}, 2, 1, new TaskRandom(1));
        assertEquals(2, full.x().capacity());
        assertEquals(1, last.x().capacity());
        assertSame(full, in.fill(x, y, new int[] {2, 1, 0}, 0, 2, new TaskRandom(1)));
        assertTrue(full.noise().isEmpty());
    }

    private static float[] values(FloatBuffer b) {
        float[] out = new float[b.remaining()];
        b.duplicate().get(out);
        return out;
    }
}

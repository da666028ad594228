package org.mjfl.app.training;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Fills the inputs of each step from the shard: the batch's samples gathered in permutation
 * order, their labels, and the task generator's next U[0, 1) noise per dropout site, in the
 * program's input order, each {@code (*features, N)} in C order. Buffers are kept per batch
 * size (a round uses at most two: {@code batch_size} and the remainder), so a runtime may wrap
 * each once.
 */
public final class StepInputs {
    private final int sampleSize;
    private final long[] sampleShape;
    private final List<long[]> noiseFeatures;
    private final Map<Integer, Batch> buffers = new HashMap<>();

    public StepInputs(long[] sampleShape, List<long[]> noiseFeatures) {
        this.sampleShape = sampleShape.clone();
        this.sampleSize = Math.toIntExact(numel(sampleShape));
        this.noiseFeatures = new ArrayList<>();
        for (long[] f : noiseFeatures) {
            this.noiseFeatures.add(f.clone());
        }
    }

    /**
     * The batch of samples {@code order[from .. from + n)}.
     *
     * @param x the shard's inputs, {@code [shard n, *input_shape]} flat
     * @param y the shard's labels
     * @param random the task's generator: the noise continues its running counter
     */
    public Batch fill(float[] x, long[] y, int[] order, int from, int n, TaskRandom random) {
        Batch b = buffers.computeIfAbsent(n, this::allocate);
        FloatBuffer xb = b.x();
        LongBuffer yb = b.y();
        xb.clear();
        yb.clear();
        for (int k = 0; k < n; k++) {
            int i = order[from + k];
            xb.put(x, i * sampleSize, sampleSize);
            yb.put(y[i]);
        }
        xb.flip();
        yb.flip();
        for (FloatBuffer noise : b.noise()) {
            noise.clear();
            random.fillNoise(noise);
            noise.flip();
        }
        return b;
    }

    private Batch allocate(int n) {
        long[] xShape = new long[sampleShape.length + 1];
        xShape[0] = n;
        System.arraycopy(sampleShape, 0, xShape, 1, sampleShape.length);
        List<FloatBuffer> noise = new ArrayList<>();
        List<long[]> noiseShapes = new ArrayList<>();
        for (long[] f : noiseFeatures) {
            long[] shape = new long[f.length + 1];
            System.arraycopy(f, 0, shape, 0, f.length);
            shape[f.length] = n;
            noise.add(floats(numel(shape)));
            noiseShapes.add(shape);
        }
        return new Batch(n, floats((long) n * sampleSize), xShape, longs(n), new long[] {n}, List.copyOf(noise),
                List.copyOf(noiseShapes));
    }

    private static FloatBuffer floats(long n) {
        return ByteBuffer.allocateDirect(Math.toIntExact(n * 4)).order(ByteOrder.nativeOrder()).asFloatBuffer();
    }

    private static LongBuffer longs(long n) {
        return ByteBuffer.allocateDirect(Math.toIntExact(n * 8)).order(ByteOrder.nativeOrder()).asLongBuffer();
    }

    static long numel(long[] shape) {
        long n = 1;
        for (long d : shape) {
            n = Math.multiplyExact(n, d);
        }
        return n;
    }
}

package org.mjfl.app.training;

import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import java.util.List;

/**
 * The inputs of one step, {@code forward(x, y, *noise)} (docs/models.md, "Inputs of one step"),
 * in direct buffers of the platform's byte order, each exactly as large as its shape, as
 * ExecuTorch's {@code Tensor.fromBlob} wants them. Valid until the next batch is filled.
 *
 * @param size N, the samples in the batch
 * @param x float32 {@code [N, *input_shape]}
 * @param y int64 {@code [N]}
 * @param noise one float32 {@code (*features, N)} per dropout site, uniform in [0, 1)
 */
public record Batch(int size, FloatBuffer x, long[] xShape, LongBuffer y, long[] yShape, List<FloatBuffer> noise,
        List<long[]> noiseShapes) {}

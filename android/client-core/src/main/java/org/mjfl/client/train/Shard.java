package org.mjfl.client.train;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import org.mjfl.client.protocol.Message;

/**
 * A device's data shard for one job (protocol.md 5.3): {@code n} samples, {@code x} float32
 * [n, *input_shape] and {@code y} int64 [n], C-order. The arrays are shared: read, never write.
 */
public record Shard(int n, List<Long> inputShape, float[] x, long[] y) {
    /**
     * The shard from its artifact bytes: x then y, little-endian, no padding (section 6). The
     * artifact does not record n; the job's input shape fixes it.
     *
     * @throws IllegalArgumentException if the length does not fit the input shape
     */
    public static Shard fromArtifact(byte[] bytes, Message.ModelSpec model) {
        long perSample = model.sampleSize() * 4 + 8;
        if (bytes.length % perSample != 0) {
            throw new IllegalArgumentException(bytes.length + " bytes is no whole number of samples of " + model.inputShape());
        }
        int n = (int) (bytes.length / perSample);
        ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        float[] x = new float[(int) (n * model.sampleSize())];
        b.asFloatBuffer().get(x);
        long[] y = new long[n];
        b.position(x.length * 4);
        b.slice().order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(y);
        return new Shard(n, model.inputShape(), x, y);
    }

    /** The shard from a provision's x and y tensors (copied out of the message). */
    public static Shard fromTensors(org.mjfl.client.protocol.Tensor x, org.mjfl.client.protocol.Tensor y,
            Message.ModelSpec model) {
        return new Shard((int) y.numel(), model.inputShape(), x.toFloats(), y.toLongs());
    }
}

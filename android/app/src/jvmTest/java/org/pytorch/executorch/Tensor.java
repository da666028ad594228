package org.pytorch.executorch;

import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;
import java.util.Arrays;

/**
 * Test double of executorch-android 1.5.1's Tensor (Tensor.kt), with its contract where the app
 * relies on it: {@code fromBlob} over a buffer keeps the buffer (no copy; direct, native order,
 * capacity equal to the shape's elements, or IllegalArgumentException), {@code getRawDataBuffer}
 * returns that very buffer, and the {@code getDataAs*Array} getters read all of it from its
 * start. Only float32, float64, int32 and int64 tensors exist here.
 */
public abstract class Tensor {
    private final long[] shape;

    Tensor(long[] shape) {
        for (long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException("Shape elements must be non negative");
            }
        }
        this.shape = shape.clone();
    }

    public static Tensor fromBlob(FloatBuffer data, long[] shape) {
        checkBuffer(data, data.isDirect(), data.order(), shape);
        return new Float32(data, shape);
    }

    public static Tensor fromBlob(LongBuffer data, long[] shape) {
        checkBuffer(data, data.isDirect(), data.order(), shape);
        return new Int64(data, shape);
    }

    public static Tensor fromBlob(IntBuffer data, long[] shape) {
        checkBuffer(data, data.isDirect(), data.order(), shape);
        return new Int32(data, shape);
    }

    public static Tensor fromBlob(DoubleBuffer data, long[] shape) {
        checkBuffer(data, data.isDirect(), data.order(), shape);
        return new Float64(data, shape);
    }

    /** A tensor over a copy of {@code data}. */
    public static Tensor fromBlob(float[] data, long[] shape) {
        checkCapacity(data.length, shape);
        FloatBuffer b = ByteBuffer.allocateDirect(data.length * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
        b.put(data);
        return new Float32(b, shape);
    }

    /** A tensor over a copy of {@code data}. */
    public static Tensor fromBlob(long[] data, long[] shape) {
        checkCapacity(data.length, shape);
        LongBuffer b = ByteBuffer.allocateDirect(data.length * 8).order(ByteOrder.nativeOrder()).asLongBuffer();
        b.put(data);
        return new Int64(b, shape);
    }

    public static long numel(long[] shape) {
        long n = 1;
        for (long d : shape) {
            n *= d;
        }
        return n;
    }

    public long numel() {
        return numel(shape);
    }

    public long[] shape() {
        return shape.clone();
    }

    public abstract DType dtype();

    public float[] getDataAsFloatArray() {
        throw new IllegalStateException("Tensor of type " + getClass().getSimpleName() + " cannot return data as float array.");
    }

    public long[] getDataAsLongArray() {
        throw new IllegalStateException("Tensor of type " + getClass().getSimpleName() + " cannot return data as long array.");
    }

    public void copyDataInto(FloatBuffer dst) {
        throw new IllegalStateException("Tensor of type " + getClass().getSimpleName() + " cannot copy data into FloatBuffer.");
    }

    public abstract Buffer getRawDataBuffer();

    @Override
    public String toString() {
        return "Tensor(" + Arrays.toString(shape) + ", dtype=" + dtype() + ")";
    }

    private static void checkBuffer(Buffer data, boolean direct, ByteOrder order, long[] shape) {
        checkCapacity(data.capacity(), shape);
        if (!direct) {
            throw new IllegalArgumentException("Data buffer must be direct (java.nio.ByteBuffer#allocateDirect)");
        }
        if (order != ByteOrder.nativeOrder()) {
            throw new IllegalArgumentException("Data buffer must have native byte order (java.nio.ByteOrder#nativeOrder)");
        }
    }

    private static void checkCapacity(int capacity, long[] shape) {
        if (numel(shape) != capacity) {
            throw new IllegalArgumentException("Inconsistent data capacity:" + capacity + " and shape number elements:"
                    + numel(shape) + " shape:" + Arrays.toString(shape));
        }
    }

    private static final class Float32 extends Tensor {
        private final FloatBuffer data;

        Float32(FloatBuffer data, long[] shape) {
            super(shape);
            this.data = data;
        }

        @Override
        public DType dtype() {
            return DType.FLOAT;
        }

        @Override
        public Buffer getRawDataBuffer() {
            return data;
        }

        @Override
        public float[] getDataAsFloatArray() {
            data.rewind();
            float[] out = new float[data.remaining()];
            data.get(out);
            return out;
        }

        @Override
        public void copyDataInto(FloatBuffer dst) {
            data.rewind();
            dst.put(data);
        }
    }

    private static final class Int64 extends Tensor {
        private final LongBuffer data;

        Int64(LongBuffer data, long[] shape) {
            super(shape);
            this.data = data;
        }

        @Override
        public DType dtype() {
            return DType.INT64;
        }

        @Override
        public Buffer getRawDataBuffer() {
            return data;
        }

        @Override
        public long[] getDataAsLongArray() {
            data.rewind();
            long[] out = new long[data.remaining()];
            data.get(out);
            return out;
        }
    }

    private static final class Int32 extends Tensor {
        private final IntBuffer data;

        Int32(IntBuffer data, long[] shape) {
            super(shape);
            this.data = data;
        }

        @Override
        public DType dtype() {
            return DType.INT32;
        }

        @Override
        public Buffer getRawDataBuffer() {
            return data;
        }
    }

    private static final class Float64 extends Tensor {
        private final DoubleBuffer data;

        Float64(DoubleBuffer data, long[] shape) {
            super(shape);
            this.data = data;
        }

        @Override
        public DType dtype() {
            return DType.DOUBLE;
        }

        @Override
        public Buffer getRawDataBuffer() {
            return data;
        }
    }
}

package org.mjfl.client.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * One named tensor of a binary message (section 3): dtype, shape and its little-endian bytes,
 * C-order. A decoded tensor is a read-only view into the message (no copy).
 */
public final class Tensor {
    private final String name;
    private final DType dtype;
    private final long[] shape;
    private final ByteBuffer data;

    /** {@code data}'s remaining bytes must be exactly product(shape) x itemsize. */
    public Tensor(String name, DType dtype, long[] shape, ByteBuffer data) {
        this.name = name;
        this.dtype = dtype;
        this.shape = shape.clone();
        long nbytes = nbytes(dtype, this.shape);
        if (data.remaining() != nbytes) {
            throw new IllegalArgumentException(
                    "tensor " + name + ": " + data.remaining() + " bytes, its dtype and shape need " + nbytes);
        }
        this.data = data.slice().order(ByteOrder.LITTLE_ENDIAN);
    }

    /** A float32 tensor holding a copy of {@code values}. */
    public static Tensor ofFloats(String name, long[] shape, float[] values) {
        ByteBuffer b = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        b.asFloatBuffer().put(values);
        return new Tensor(name, DType.FLOAT32, shape, b);
    }

    /** A tensor of any dtype from its raw little-endian bytes (copied). */
    public static Tensor ofBytes(String name, DType dtype, long[] shape, byte[] raw) {
        return new Tensor(name, dtype, shape, ByteBuffer.wrap(raw.clone()));
    }

    /** product(shape); {@code []} is a scalar of one element. Throws ArithmeticException on overflow. */
    public static long numel(long[] shape) {
        long n = 1;
        for (long d : shape) {
            n = Math.multiplyExact(n, d);
        }
        return n;
    }

    public static long nbytes(DType dtype, long[] shape) {
        return Math.multiplyExact(numel(shape), (long) dtype.itemSize());
    }

    public String name() {
        return name;
    }

    public DType dtype() {
        return dtype;
    }

    public long[] shape() {
        return shape.clone();
    }

    public long numel() {
        return numel(shape);
    }

    public int nbytes() {
        return data.capacity();
    }

    /** The bytes, little-endian, position 0; a fresh view each call (share-safe). */
    public ByteBuffer data() {
        return data.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    }

    /** Same name, dtype and shape: what a result must keep of its task (5.5). */
    public boolean sameSpec(Tensor other) {
        return name.equals(other.name) && dtype == other.dtype && Arrays.equals(shape, other.shape);
    }

    /** The values as floats (a copy); integer dtypes are converted. */
    public float[] toFloats() {
        int n = Math.toIntExact(numel());
        float[] out = new float[n];
        ByteBuffer b = data();
        switch (dtype) {
            case FLOAT32:
                b.asFloatBuffer().get(out);
                break;
            default:
                for (int i = 0; i < n; i++) {
                    out[i] = (float) doubleAt(b, i);
                }
        }
        return out;
    }

    /** The values as doubles (a copy); int64 beyond 2^53 loses precision. */
    public double[] toDoubles() {
        int n = Math.toIntExact(numel());
        double[] out = new double[n];
        ByteBuffer b = data();
        for (int i = 0; i < n; i++) {
            out[i] = doubleAt(b, i);
        }
        return out;
    }

    /** The values of an integer tensor (a copy). */
    public long[] toLongs() {
        if (dtype.isFloating()) {
            throw new IllegalStateException("tensor " + name + " is " + dtype.wireName());
        }
        int n = Math.toIntExact(numel());
        long[] out = new long[n];
        ByteBuffer b = data();
        for (int i = 0; i < n; i++) {
            out[i] = longAt(b, i);
        }
        return out;
    }

    /** Every value finite (always true for integer dtypes); sections 5.4, 5.5, 7.2. */
    public boolean allFinite() {
        ByteBuffer b = data();
        int n = Math.toIntExact(numel());
        switch (dtype) {
            case FLOAT32:
                for (int i = 0; i < n; i++) {
                    if (!Float.isFinite(b.getFloat(i * 4))) {
                        return false;
                    }
                }
                return true;
            case FLOAT64:
                for (int i = 0; i < n; i++) {
                    if (!Double.isFinite(b.getDouble(i * 8))) {
                        return false;
                    }
                }
                return true;
            case FLOAT16:
                for (int i = 0; i < n; i++) {
                    if (!Half.isFinite(b.getShort(i * 2))) {
                        return false;
                    }
                }
                return true;
            default:
                return true;
        }
    }

    private double doubleAt(ByteBuffer b, int i) {
        switch (dtype) {
            case FLOAT32:
                return b.getFloat(i * 4);
            case FLOAT64:
                return b.getDouble(i * 8);
            case FLOAT16:
                return Half.toFloat(b.getShort(i * 2));
            default:
                return longAt(b, i);
        }
    }

    private long longAt(ByteBuffer b, int i) {
        switch (dtype) {
            case INT64:
                return b.getLong(i * 8);
            case INT32:
                return b.getInt(i * 4);
            case INT8:
                return b.get(i);
            case UINT8:
                return b.get(i) & 0xff;
            default:
                throw new IllegalStateException(dtype.wireName() + " is not an integer dtype");
        }
    }

    @Override
    public String toString() {
        return name + ":" + dtype.wireName() + Arrays.toString(shape);
    }
}

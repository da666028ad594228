package org.pytorch.executorch;

import java.nio.Buffer;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;

/**
 * Compile-only stub of executorch-android 1.5.1 (Tensor.kt): the Java view of the members the
 * app uses; see src/stubs/README.md.
 */
public abstract class Tensor {
    Tensor() {}

    public static Tensor fromBlob(FloatBuffer data, long[] shape) {
        throw new UnsupportedOperationException("stub");
    }

    public static Tensor fromBlob(LongBuffer data, long[] shape) {
        throw new UnsupportedOperationException("stub");
    }

    public static Tensor fromBlob(float[] data, long[] shape) {
        throw new UnsupportedOperationException("stub");
    }

    public long numel() {
        throw new UnsupportedOperationException("stub");
    }

    public long[] shape() {
        throw new UnsupportedOperationException("stub");
    }

    public abstract DType dtype();

    public float[] getDataAsFloatArray() {
        throw new UnsupportedOperationException("stub");
    }

    public long[] getDataAsLongArray() {
        throw new UnsupportedOperationException("stub");
    }

    public void copyDataInto(FloatBuffer dst) {
        throw new UnsupportedOperationException("stub");
    }

    public Buffer getRawDataBuffer() {
        throw new UnsupportedOperationException("stub");
    }
}

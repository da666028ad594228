package org.pytorch.executorch;

/** Compile-only stub of executorch-android 1.5.1 (DType.kt); see src/stubs/README.md. */
public enum DType {
    UINT8(0), INT8(1), INT16(2), INT32(3), INT64(4), HALF(5), FLOAT(6), DOUBLE(7), BOOL(11);

    public final int jniCode;

    DType(int jniCode) {
        this.jniCode = jniCode;
    }
}

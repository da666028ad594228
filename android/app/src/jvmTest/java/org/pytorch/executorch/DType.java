package org.pytorch.executorch;

/** Test double of executorch-android 1.5.1's DType: the same constants and JNI codes (ScalarType). */
public enum DType {
    UINT8(0), INT8(1), INT16(2), INT32(3), INT64(4), HALF(5), FLOAT(6), DOUBLE(7), BOOL(11);

    public final int jniCode;

    DType(int jniCode) {
        this.jniCode = jniCode;
    }

    public static DType fromJniCode(int jniCode) {
        for (DType d : values()) {
            if (d.jniCode == jniCode) {
                return d;
            }
        }
        throw new IllegalArgumentException("no DType with JNI code " + jniCode);
    }
}

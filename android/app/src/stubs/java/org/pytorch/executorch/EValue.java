package org.pytorch.executorch;

/** Compile-only stub of executorch-android 1.5.1 (EValue.kt); see src/stubs/README.md. */
public final class EValue {
    private EValue() {}

    public static EValue from(Tensor tensor) {
        throw new UnsupportedOperationException("stub");
    }

    public boolean isTensor() {
        throw new UnsupportedOperationException("stub");
    }

    public Tensor toTensor() {
        throw new UnsupportedOperationException("stub");
    }

    public double toDouble() {
        throw new UnsupportedOperationException("stub");
    }
}

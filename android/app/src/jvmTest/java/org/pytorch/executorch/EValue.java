package org.pytorch.executorch;

/** Test double of executorch-android 1.5.1's EValue, for the values the app passes: tensors, doubles. */
public final class EValue {
    private final Object value;

    private EValue(Object value) {
        this.value = value;
    }

    public static EValue from(Tensor tensor) {
        return new EValue(tensor);
    }

    public static EValue from(double value) {
        return new EValue(value);
    }

    public boolean isTensor() {
        return value instanceof Tensor;
    }

    public Tensor toTensor() {
        if (!isTensor()) {
            throw new IllegalStateException("Expected EValue type Tensor, actual type " + typeName());
        }
        return (Tensor) value;
    }

    public double toDouble() {
        if (!(value instanceof Double)) {
            throw new IllegalStateException("Expected EValue type Double, actual type " + typeName());
        }
        return (Double) value;
    }

    private String typeName() {
        return value instanceof Tensor ? "Tensor" : "Double";
    }
}

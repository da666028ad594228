package org.pytorch.executorch.training;

import java.io.Closeable;
import java.util.Map;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Tensor;

/** Compile-only stub of executorch-android 1.5.1 (training/TrainingModule.kt); see src/stubs/README.md. */
public final class TrainingModule implements Closeable {
    private TrainingModule() {}

    public static TrainingModule load(String modelPath) {
        throw new UnsupportedOperationException("stub");
    }

    public static TrainingModule load(String modelPath, String dataPath) {
        throw new UnsupportedOperationException("stub");
    }

    public EValue[] executeForwardBackward(String methodName, EValue... inputs) {
        throw new UnsupportedOperationException("stub");
    }

    public Map<String, Tensor> namedParameters(String methodName) {
        throw new UnsupportedOperationException("stub");
    }

    public Map<String, Tensor> namedGradients(String methodName) {
        throw new UnsupportedOperationException("stub");
    }

    @Override
    public void close() {
        throw new UnsupportedOperationException("stub");
    }
}

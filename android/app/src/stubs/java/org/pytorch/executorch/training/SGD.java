package org.pytorch.executorch.training;

import java.util.Map;
import org.pytorch.executorch.Tensor;

/** Compile-only stub of executorch-android 1.5.1 (training/SGD.kt); see src/stubs/README.md. */
public final class SGD {
    private SGD() {}

    public static SGD create(Map<String, Tensor> namedParameters, double learningRate, double momentum,
            double dampening, double weightDecay, boolean nesterov) {
        throw new UnsupportedOperationException("stub");
    }

    public static SGD create(Map<String, Tensor> namedParameters, double learningRate) {
        throw new UnsupportedOperationException("stub");
    }

    public void step(Map<String, Tensor> namedGradients) {
        throw new UnsupportedOperationException("stub");
    }
}

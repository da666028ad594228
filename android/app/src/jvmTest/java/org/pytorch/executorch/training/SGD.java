package org.pytorch.executorch.training;

import com.facebook.jni.HybridData;
import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.pytorch.executorch.Tensor;
import org.pytorch.executorch.training.PythonRuntime.Blob;

/**
 * Test double of executorch-android 1.5.1's SGD (training/SGD.kt): ExecuTorch's C++ SGD
 * ({@code get_sgd_optimizer} in Python) on the runtime's own parameter tensors.
 *
 * <p>On a phone the optimizer updates the memory of the tensors it was created on. Here those
 * must be tensors a {@link TrainingModule#namedParameters} call handed out (whatever the names
 * they are keyed by): the optimizer is created on the runtime parameters they view, and after
 * each {@link #step} the runtime's new values are copied back into those tensors' buffers. A
 * step takes the gradients from the tensors it is given, as the real one reads their memory.
 *
 * <p>Like the real class it has no {@code close()}: its {@code mHybridData} frees the runtime's
 * optimizer on {@code resetNative()}, after which {@link #step} throws IllegalStateException.
 */
public final class SGD {
    private final HybridData mHybridData;
    private final TrainingModule module;
    private final long id;

    private SGD(Map<String, Tensor> namedParameters, double learningRate, double momentum, double dampening,
            double weightDecay, boolean nesterov) {
        TrainingModule owner = null;
        JsonObject names = new JsonObject();
        for (Map.Entry<String, Tensor> e : namedParameters.entrySet()) {
            TrainingModule.Binding b = TrainingModule.bindingOf(e.getValue());
            if (b == null) {
                throw new UnsupportedOperationException("parameter " + e.getKey() + " is no tensor that "
                        + "TrainingModule.namedParameters handed out: this double updates only the runtime's own");
            }
            if (owner != null && owner != b.module()) {
                throw new UnsupportedOperationException("the parameters come from two modules");
            }
            owner = b.module();
            names.addProperty(e.getKey(), b.name());
        }
        if (owner == null) {
            throw new IllegalArgumentException("SGD over no parameters");
        }
        owner.checkNotDestroyed();
        JsonObject h = owner.request("sgd_create");
        h.add("names", names);
        h.addProperty("lr", learningRate);
        h.addProperty("momentum", momentum);
        h.addProperty("dampening", dampening);
        h.addProperty("weight_decay", weightDecay);
        h.addProperty("nesterov", nesterov);
        PythonRuntime runtime = owner.runtime();
        this.module = owner;
        this.id = runtime.call(h, Map.of("write", owner.writes())).header().get("optimizer").getAsLong();
        this.mHybridData = new HybridData(() -> runtime.call(request("sgd_release"), Map.of()));
    }

    public static SGD create(Map<String, Tensor> namedParameters, double learningRate, double momentum,
            double dampening, double weightDecay, boolean nesterov) {
        return new SGD(namedParameters, learningRate, momentum, dampening, weightDecay, nesterov);
    }

    public static SGD create(Map<String, Tensor> namedParameters, double learningRate) {
        return create(namedParameters, learningRate, 0.0, 0.0, 0.0, false);
    }

    public void step(Map<String, Tensor> namedGradients) {
        if (!mHybridData.isValid()) {
            throw new IllegalStateException("SGD optimizer has been destroyed");
        }
        module.checkNotDestroyed();
        List<Blob> gradients = new ArrayList<>();
        for (Map.Entry<String, Tensor> e : namedGradients.entrySet()) {
            gradients.add(PythonRuntime.blob(e.getKey(), e.getValue()));
        }
        synchronized (module) {
            Map<String, List<Blob>> tensors = new LinkedHashMap<>();
            tensors.put("write", module.writes());
            tensors.put("gradients", gradients);
            PythonRuntime.Reply r = module.runtime().call(request("sgd_step"), tensors);
            module.storeParameters(r.group("parameters"));
        }
    }

    private JsonObject request(String op) {
        JsonObject h = PythonRuntime.op(op);
        h.addProperty("optimizer", id);
        return h;
    }
}

package org.mjfl.app;

import java.nio.Buffer;
import java.nio.FloatBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.logging.Logger;
import org.mjfl.app.training.Batch;
import org.mjfl.app.training.ProgramException;
import org.mjfl.app.training.ProgramSignature;
import org.mjfl.app.training.TrainingProgram;
import org.pytorch.executorch.DType;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Tensor;
import org.pytorch.executorch.training.SGD;
import org.pytorch.executorch.training.TrainingModule;

/**
 * A training program in ExecuTorch's runtime (executorch-android 1.5.1,
 * {@code org.pytorch.executorch.training}).
 *
 * <p>How the task's weights get into the runtime: {@code TrainingModule.namedParameters("forward")}
 * returns Java tensors whose buffers are the runtime's own parameter memory. Its JNI
 * ({@code jni_layer_training.cpp}, {@code namedParameters}) wraps each tensor of the C++
 * {@code TrainingModule::named_parameters} with {@code TensorHybrid::newJTensorFromTensor}, which
 * ({@code jni_layer.cpp}) calls {@code JByteBuffer::wrapBytes(tensor.data_ptr(), nbytes)} in
 * native order: a direct buffer over that memory, no copy, and {@code Tensor.nativeNewTensor}
 * keeps it as the tensor's {@code FloatBuffer} ({@code data.asFloatBuffer()}), returned by the
 * public {@code getRawDataBuffer()}. Writing through that buffer writes the parameters.
 * {@code SGD.create} takes the same tensors and updates the same memory in place
 * ({@code SGDHybrid}: {@code from_blob} over {@code GetDirectBufferAddress}). {@link #start}
 * checks the write by reading the parameters back through a second {@code namedParameters} call.
 *
 * <p>What a task leaves behind, and how it is released (read in executorch's sources; the
 * training API, {@code training/SGD.kt}, {@code training/TrainingModule.kt},
 * {@code jni_layer_training.cpp} and {@code training_module.cpp}, is the same in release/1.4 and
 * on main after 1.5.0, so in 1.5.1):
 * <ul>
 *   <li>{@code SGD} holds its C++ optimizer (whose momentum buffers, as large as the parameters,
 *       are {@code malloc}ed by {@code optimizer::SGD::step} and freed by {@code ~SGD}) in a
 *       private fbjni {@code HybridData} and has no {@code close()}. The memory goes when
 *       fbjni's DestructorThread sees the SGD collected, which native memory alone never
 *       prompts; {@code HybridData.resetNative()} frees it at once, and {@code SGD.step} checks
 *       {@code mHybridData.isValid} for exactly that case. {@link Run#close()} calls it.
 *   <li>{@code TrainingModule.close()} calls {@code resetNative()} on its own HybridData: the
 *       module, its methods and their planned memory go at once ({@link #close()}).
 * </ul>
 */
final class ExecuTorchProgram implements TrainingProgram {
    private static final Logger LOG = Logger.getLogger(ExecuTorchProgram.class.getName());

    private final TrainingModule module;
    private final ProgramSignature signature;
    private final Map<String, Tensor> parameters;

    private ExecuTorchProgram(TrainingModule module, ProgramSignature signature, Map<String, Tensor> parameters) {
        this.module = module;
        this.signature = signature;
        this.parameters = parameters;
    }

    /**
     * Loads a {@code .pte} training program (its weights inside it, no {@code .ptd}) whose file
     * {@link ProgramSignature#read(Path, String)} described as {@code signature}. The runtime
     * allocates the method's planned memory here, in the first {@code namedParameters}.
     */
    static ExecuTorchProgram load(Path pte, ProgramSignature signature) throws ProgramException {
        TrainingModule module = TrainingModule.load(pte.toString());
        try {
            Map<String, Tensor> parameters = module.namedParameters(METHOD);
            List<String> names = signature.parameterNames();
            if (!parameters.keySet().equals(new HashSet<>(names))) {
                throw new ProgramException("the runtime's parameters " + parameters.keySet()
                        + " are not the program's " + names);
            }
            for (int i = 0; i < names.size(); i++) {
                Tensor t = parameters.get(names.get(i));
                if (!Arrays.equals(t.shape(), signature.parameterShapes().get(i))
                        || t.dtype() != DType.FLOAT) {
                    throw new ProgramException("runtime parameter " + names.get(i) + " is " + t.dtype()
                            + Arrays.toString(t.shape()));
                }
            }
            return new ExecuTorchProgram(module, signature, parameters);
        } catch (ProgramException | RuntimeException e) {
            module.close();
            throw e;
        }
    }

    @Override
    public ProgramSignature signature() {
        return signature;
    }

    @Override
    public TaskRun start(Map<String, float[]> values, double lr, double momentum, double weightDecay)
            throws ProgramException {
        for (Map.Entry<String, float[]> e : values.entrySet()) {
            write(parameters.get(e.getKey()), e.getKey(), e.getValue());
        }
        checkWritten(values);
        // docs/models.md: one optimizer per task, on the parameter tensors holding its weights;
        // torch.optim.SGD with dampening 0 and no Nesterov.
        SGD sgd = SGD.create(parameters, lr, momentum, 0.0, weightDecay, false);
        return new Run(sgd);
    }

    /** Frees the optimizer's native memory (its momentum buffers) now ({@link NativeRelease}). */
    private static void release(SGD sgd) {
        NativeRelease.resetNative(sgd, SGD.class, "the optimizer's native memory", LOG);
    }

    private static void write(Tensor t, String name, float[] values) throws ProgramException {
        Buffer raw = t == null ? null : t.getRawDataBuffer();
        if (!(raw instanceof FloatBuffer)) {
            throw new ProgramException("cannot write program parameter " + name);
        }
        // A duplicate shares the memory but not the position that the tensor's own reads move.
        FloatBuffer dst = ((FloatBuffer) raw).duplicate();
        dst.clear();
        if (dst.remaining() != values.length) {
            throw new ProgramException("program parameter " + name + " holds " + dst.remaining() + " values, the task "
                    + values.length);
        }
        dst.put(values);
    }

    /** A fresh namedParameters call wraps the runtime's memory again: it must show the task's values. */
    private void checkWritten(Map<String, float[]> values) throws ProgramException {
        Map<String, Tensor> again = module.namedParameters(METHOD);
        for (Map.Entry<String, float[]> e : values.entrySet()) {
            if (!Arrays.equals(again.get(e.getKey()).getDataAsFloatArray(), e.getValue())) {
                throw new ProgramException("writing parameter " + e.getKey() + " did not reach the runtime's memory");
            }
        }
    }

    /** The inputs of a step over the batch's buffers, without a copy. */
    private static EValue[] wrap(Batch batch) {
        EValue[] in = new EValue[2 + batch.noise().size()];
        in[0] = EValue.from(Tensor.fromBlob(batch.x(), batch.xShape()));
        in[1] = EValue.from(Tensor.fromBlob(batch.y(), batch.yShape()));
        for (int i = 0; i < batch.noise().size(); i++) {
            in[2 + i] = EValue.from(Tensor.fromBlob(batch.noise().get(i), batch.noiseShapes().get(i)));
        }
        return in;
    }

    private final class Run implements TaskRun {
        private SGD sgd;
        /**
         * The inputs, wrapped once per batch buffer: the JNI ({@code newTensorFromJTensor}) reads
         * each tensor's shape and {@code GetDirectBufferAddress} afresh on every call, so a
         * wrapper over a buffer that {@link org.mjfl.app.training.StepInputs} refills stays right.
         */
        private final Map<Batch, EValue[]> inputs = new IdentityHashMap<>();
        /**
         * {@code namedGradients}, asked once, after the first step. Safe across steps: C++
         * {@code TrainingModule::named_gradients} returns a map filled once, at the method's
         * first {@code execute_forward_backward}, with the method's gradient output tensors
         * ("the tensors in the dict and the tensors in the method alias the same TensorImpl");
         * those outputs are memory-planned (MethodMeta says so of every output of mjfl's
         * programs), so their data pointers are set when the method is loaded and kept until it
         * is unloaded (runtime/executor/method.cpp resets only unplanned tensors; the Java API
         * never unloads, and {@code close()} ends the module and this run with it). The Java tensors wrap those pointers without a copy
         * ({@code newJTensorFromTensor}: {@code JByteBuffer::wrapBytes}), so each step's
         * gradients are read through the same wrappers; a gradient's size does not depend on
         * the batch.
         */
        private Map<String, Tensor> gradients;

        Run(SGD sgd) {
            this.sgd = sgd;
        }

        @Override
        public StepOutputs step(Batch batch) throws ProgramException {
            if (sgd == null) {
                throw new IllegalStateException("the task's run is closed");
            }
            EValue[] in = inputs.computeIfAbsent(batch, ExecuTorchProgram::wrap);
            EValue[] out = module.executeForwardBackward(METHOD, in);
            if (out.length != signature.gradientsIndex()) {
                throw new ProgramException("forward returned " + out.length + " values before its gradients, expected "
                        + signature.gradientsIndex());
            }
            // The outputs alias the runtime's memory until the next run: copy what is kept.
            float loss = out[0].toTensor().getDataAsFloatArray()[0];
            List<float[]> stats = new ArrayList<>();
            for (int i = 2; i < out.length; i++) {
                stats.add(out[i].toTensor().getDataAsFloatArray());
            }
            if (gradients == null) {
                gradients = module.namedGradients(METHOD); // exists once forward has run
            }
            sgd.step(gradients);
            return new StepOutputs(loss, stats);
        }

        @Override
        public float[] parameter(String programName) {
            return parameters.get(programName).getDataAsFloatArray();
        }

        @Override
        public void close() {
            SGD s = sgd;
            sgd = null;
            gradients = null;
            inputs.clear();
            if (s != null) {
                release(s);
            }
        }
    }

    @Override
    public void close() {
        module.close();
    }
}

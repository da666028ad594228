package org.mjfl.app;

import java.io.IOException;
import java.nio.Buffer;
import java.nio.FloatBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
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
 */
final class ExecuTorchProgram implements TrainingProgram {
    static final String METHOD = "forward";

    private final TrainingModule module;
    private final ProgramSignature signature;
    private final Map<String, Tensor> parameters;

    private ExecuTorchProgram(TrainingModule module, ProgramSignature signature, Map<String, Tensor> parameters) {
        this.module = module;
        this.signature = signature;
        this.parameters = parameters;
    }

    /** Loads a {@code .pte} training program (its weights inside it, no {@code .ptd}). */
    static ExecuTorchProgram load(Path pte) throws IOException, ProgramException {
        ProgramSignature signature;
        try (FileChannel ch = FileChannel.open(pte, StandardOpenOption.READ)) {
            MappedByteBuffer bytes = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
            signature = ProgramSignature.read(bytes, METHOD);
        }
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

    private final class Run implements TaskRun {
        private final SGD sgd;

        Run(SGD sgd) {
            this.sgd = sgd;
        }

        @Override
        public StepOutputs step(Batch batch) throws ProgramException {
            EValue[] inputs = new EValue[2 + batch.noise().size()];
            inputs[0] = EValue.from(Tensor.fromBlob(batch.x(), batch.xShape()));
            inputs[1] = EValue.from(Tensor.fromBlob(batch.y(), batch.yShape()));
            for (int i = 0; i < batch.noise().size(); i++) {
                inputs[2 + i] = EValue.from(Tensor.fromBlob(batch.noise().get(i), batch.noiseShapes().get(i)));
            }
            EValue[] out = module.executeForwardBackward(METHOD, inputs);
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
            // named_gradients exists once forward has run; its tensors alias the gradient outputs.
            sgd.step(module.namedGradients(METHOD));
            return new StepOutputs(loss, stats);
        }

        @Override
        public float[] parameter(String programName) {
            return parameters.get(programName).getDataAsFloatArray();
        }
    }

    @Override
    public void close() {
        module.close();
    }
}

package org.mjfl.app.training;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A training program in plain Java for the trainer's tests: softmax regression on the
 * flattened input ({@code model.fc.weight} [K, D], {@code model.fc.bias} [K]) with PyTorch's SGD,
 * optionally reporting one batch-norm layer's statistics (per-channel mean and biased variance of
 * x). It records what the trainer asked of it, and runs hooks (to move a test clock, or fail)
 * when a task starts and at each step.
 */
final class FakeProgram implements TrainingProgram {
    final ProgramSignature signature;
    final int classes;
    final int features;
    final boolean batchNorm;
    final Map<String, float[]> params = new HashMap<>();
    final List<Map<String, float[]>> starts = new ArrayList<>();
    final List<Integer> batchSizes = new ArrayList<>();
    final List<long[]> labels = new ArrayList<>();
    final List<float[]> inputs = new ArrayList<>();
    final List<float[]> noise = new ArrayList<>();
    final List<Float> losses = new ArrayList<>();
    final List<StepOutputs> outputs = new ArrayList<>();
    /** Loss to report instead of the real one at step {@code nanAt} (to test divergence). */
    int nanAt = -1;
    /** Runs as a task starts, before its optimizer exists. */
    Runnable onStart = () -> {};
    /** Runs at the start of every step, before the step's work. */
    Runnable onStep = () -> {};
    /** Task runs started, and closed (each counted once, however often it is closed). */
    int runs;
    int runsClosed;
    boolean closed;

    FakeProgram(long[] sampleShape, int classes, int maxBatch, boolean batchNorm, List<long[]> noise)
            throws ProgramException {
        this(signature(sampleShape, classes, maxBatch, batchNorm, noise, 0), classes, batchNorm);
    }

    FakeProgram(ProgramSignature signature, int classes, boolean batchNorm) {
        this.signature = signature;
        this.classes = classes;
        this.batchNorm = batchNorm;
        this.features = Math.toIntExact(StepInputs.numel(signature.sampleShape()));
    }

    /** The signature of a FakeProgram, as a file of it would read: model.fc.weight [K, D] and model.fc.bias [K]. */
    static ProgramSignature signature(long[] sampleShape, int classes, int maxBatch, boolean batchNorm,
            List<long[]> noise, long plannedBytes) throws ProgramException {
        int features = Math.toIntExact(StepInputs.numel(sampleShape));
        List<ProgramSignature.TensorSpec> inputs = new ArrayList<>();
        long[] x = new long[sampleShape.length + 1];
        x[0] = maxBatch;
        System.arraycopy(sampleShape, 0, x, 1, sampleShape.length);
        inputs.add(new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_FLOAT, x));
        inputs.add(new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_LONG, new long[] {maxBatch}));
        for (long[] f : noise) {
            long[] s = java.util.Arrays.copyOf(f, f.length + 1);
            s[f.length] = maxBatch;
            inputs.add(new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_FLOAT, s));
        }
        return ProgramSignature.of(inputs, List.of("model.fc.weight", "model.fc.bias"),
                List.of(new long[] {classes, features}, new long[] {classes}), batchNorm ? 4 : 2, plannedBytes);
    }

    @Override
    public ProgramSignature signature() {
        return signature;
    }

    @Override
    public TaskRun start(Map<String, float[]> parameters, double lr, double momentum, double weightDecay) {
        if (closed) {
            throw new IllegalStateException("the program is closed");
        }
        onStart.run();
        starts.add(new HashMap<>(parameters));
        runs++;
        for (Map.Entry<String, float[]> e : parameters.entrySet()) {
            params.put(e.getKey(), e.getValue().clone());
        }
        Map<String, float[]> buffers = new HashMap<>();
        return new TaskRun() {
            private boolean runClosed;

            @Override
            public StepOutputs step(Batch batch) {
                if (runClosed) {
                    throw new IllegalStateException("the run is closed");
                }
                onStep.run();
                int n = batch.size();
                float[] x = new float[n * features];
                batch.x().duplicate().get(x);
                long[] y = new long[n];
                batch.y().duplicate().get(y);
                for (java.nio.FloatBuffer site : batch.noise()) {
                    if (site.remaining() != site.capacity() || site.capacity() % n != 0) {
                        throw new IllegalStateException("noise not filled for the batch");
                    }
                    float[] values = new float[site.remaining()];
                    site.duplicate().get(values);
                    noise.add(values);
                }
                batchSizes.add(n);
                labels.add(y);
                inputs.add(x);
                float[] w = params.get("model.fc.weight");
                float[] b = params.get("model.fc.bias");
                float[] gw = new float[w.length];
                float[] gb = new float[b.length];
                double loss = 0;
                for (int i = 0; i < n; i++) {
                    double[] z = new double[classes];
                    double max = Double.NEGATIVE_INFINITY;
                    for (int k = 0; k < classes; k++) {
                        z[k] = b[k];
                        for (int d = 0; d < features; d++) {
                            z[k] += w[k * features + d] * x[i * features + d];
                        }
                        max = Math.max(max, z[k]);
                    }
                    double sum = 0;
                    for (int k = 0; k < classes; k++) {
                        sum += Math.exp(z[k] - max);
                    }
                    loss -= z[(int) y[i]] - max - Math.log(sum);
                    for (int k = 0; k < classes; k++) {
                        double g = (Math.exp(z[k] - max) / sum - (k == y[i] ? 1 : 0)) / n;
                        gb[k] += (float) g;
                        for (int d = 0; d < features; d++) {
                            gw[k * features + d] += (float) (g * x[i * features + d]);
                        }
                    }
                }
                sgd("w", w, gw);
                sgd("b", b, gb);
                float l = losses.size() == nanAt ? Float.NaN : (float) (loss / n);
                losses.add(l);
                List<float[]> stats = new ArrayList<>();
                if (batchNorm) {
                    stats.addAll(channelStats(x, n));
                }
                StepOutputs out = new StepOutputs(l, stats);
                outputs.add(out);
                return out;
            }

            /** torch.optim.SGD, dampening 0, no Nesterov. */
            private void sgd(String key, float[] p, float[] grad) {
                float[] buf = buffers.get(key);
                for (int i = 0; i < p.length; i++) {
                    float g = (float) (grad[i] + weightDecay * p[i]);
                    if (momentum != 0) {
                        if (buf == null) {
                            buf = new float[p.length];
                            buffers.put(key, buf);
                            java.util.Arrays.fill(buf, Float.NaN);
                        }
                        buf[i] = Float.isNaN(buf[i]) ? g : (float) (momentum * buf[i] + g);
                        g = buf[i];
                    }
                    p[i] -= (float) (lr * g);
                }
            }

            @Override
            public float[] parameter(String programName) {
                return params.get(programName).clone();
            }

            @Override
            public void close() {
                if (!runClosed) {
                    runClosed = true;
                    runsClosed++;
                }
            }
        };
    }

    /** Per channel (x's first sample dimension): mean and biased variance over batch and pixels. */
    private List<float[]> channelStats(float[] x, int n) {
        long[] shape = signature.sampleShape();
        int channels = (int) shape[0];
        int pixels = features / channels;
        float[] mean = new float[channels];
        float[] var = new float[channels];
        for (int c = 0; c < channels; c++) {
            double s = 0;
            double s2 = 0;
            for (int i = 0; i < n; i++) {
                for (int p = 0; p < pixels; p++) {
                    double v = x[i * features + c * pixels + p];
                    s += v;
                    s2 += v * v;
                }
            }
            double m = s / (n * pixels);
            mean[c] = (float) m;
            var[c] = (float) (s2 / (n * pixels) - m * m);
        }
        return List.of(mean, var);
    }

    @Override
    public void close() {
        closed = true;
    }
}

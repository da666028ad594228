package org.mjfl.app.training;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.function.BooleanSupplier;
import org.mjfl.app.training.TrainingProgram.StepOutputs;
import org.mjfl.app.training.TrainingProgram.TaskRun;
import org.mjfl.client.net.Clock;
import org.mjfl.client.protocol.DType;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.train.Shard;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/**
 * Trains one task on a training program exactly as docs/models.md, "Training a task on a
 * device", says; the runtime behind {@link TrainingProgram} only runs steps and holds the
 * parameters. Everything else (the parameter mapping, shuffling, the short last batch, the
 * noise, the batch-norm statistics, the mean loss, the result's layout) is here, in plain Java.
 * The batch order and the noise come from the task's seed ({@link TaskRandom}), so a task trains
 * the same on every device.
 *
 * <p>The last program used stays loaded between tasks ({@link LoadedPrograms}), and a task is
 * refused before anything loads when all it needs does not fit ({@link MemoryBudget},
 * {@link MemoryNeed}): a task writes its weights into the program before its first step and
 * closes its optimizer after its last, so nothing carries over between tasks but the loaded
 * program. One thread at a time.
 */
public final class ProgramTrainer implements AutoCloseable {
    /** The reason of the {@link CancellationException} that stops a task at its deadline. */
    public static final String DEADLINE_PASSED = "the deadline passed during training";

    /** Reads and loads program files; on Android, ExecuTorch's TrainingModule. */
    public interface Loader {
        /**
         * The program's signature and planned memory, from its file alone: nothing is loaded
         * into the runtime, so a program too big for the device can be refused first.
         */
        default ProgramSignature read(Path program) throws IOException, ProgramException {
            return ProgramSignature.read(program, TrainingProgram.METHOD);
        }

        /** The program file's size: read into memory with its constants when it loads. */
        default long fileBytes(Path program) throws IOException {
            return java.nio.file.Files.size(program);
        }

        /** Loads the program whose file {@link #read} described as {@code signature}. */
        TrainingProgram load(Path program, ProgramSignature signature) throws Exception;
    }

    private final LoadedPrograms programs;
    private final Clock clock;

    /**
     * @param memory what the device can give a task; the program of the last task stays loaded
     * @param clock the scale of {@link TrainingTask#deadlineAt()} (the device's clock); also
     *     times {@code compute_s}
     */
    public ProgramTrainer(Loader loader, MemoryBudget memory, Clock clock) {
        this.programs = new LoadedPrograms(loader, memory);
        this.clock = clock;
    }

    /**
     * Trains {@code task}.
     *
     * @param batchNormPixels the provision's {@code batch_norm_pixels} (empty without batch norm)
     * @param cancelled checked before every step
     * @throws ProgramException when the program, the task or the shard does not fit the contract,
     *     or what the task needs in memory does not fit the device (refused before loading anything)
     * @throws CancellationException when {@code cancelled} turned true ("cancelled"), or at the
     *     first step boundary after the task's deadline ({@link #DEADLINE_PASSED})
     */
    public TrainingResult train(TrainingTask task, long[] batchNormPixels, BooleanSupplier cancelled)
            throws Exception {
        return trainLoaded(task, programs.get(task), batchNormPixels, cancelled);
    }

    private TrainingResult trainLoaded(TrainingTask task, TrainingProgram program, long[] batchNormPixels,
            BooleanSupplier cancelled) throws Exception {
        // protocol.md 5.5's compute_s: from the task's weights going into the program to the
        // trained weights read back, as mjfl's own trainers time their whole train call (the
        // program's loading, done once per job, is left out of both).
        double start = clock.now();
        ProgramSignature sig = program.signature();
        TaskLayout layout = TaskLayout.of(entries(task.weights()), sig, batchNormPixels);
        Shard shard = task.shard();
        int n = shard.n();
        checkShard(shard, sig);
        if (task.batchSize() < 1 || task.batchSize() > sig.maxBatch()) {
            throw new ProgramException("batch_size " + task.batchSize() + " is outside the program's bound [1, "
                    + sig.maxBatch() + "]");
        }
        if (task.epochs() < 1) {
            throw new ProgramException("epochs " + task.epochs() + " < 1");
        }
        if (task.seed() < 0) {
            throw new ProgramException("seed " + task.seed() + " is outside [0, 2^63)");
        }
        int batchSize = (int) task.batchSize();
        long epochs = task.epochs();

        Map<String, float[]> initial = new LinkedHashMap<>();
        List<Tensor> weights = task.weights();
        for (int i = 0; i < weights.size(); i++) {
            if (layout.programName(i) != null) {
                initial.put(layout.programName(i), weights.get(i).toFloats());
            }
        }
        BatchNormStats stats = batchNormStats(layout, weights);
        StepInputs inputs = new StepInputs(sig.sampleShape(), sig.noiseFeatures());
        TaskRandom random = new TaskRandom(task.seed());

        // The run holds the task's optimizer (its momentum buffers): released however the task ends.
        try (TaskRun run = program.start(initial, task.lr(), task.momentum(), task.weightDecay())) {
            double lossSum = 0;
            int perEpoch = Shuffle.batchesPerEpoch(n, batchSize);
            training:
            for (long epoch = 0; epoch < epochs; epoch++) {
                int[] order = random.permutation(epoch, n);
                for (int b = 0; b < perEpoch; b++) {
                    checkGoOn(task, cancelled);
                    int length = Shuffle.batchLength(n, batchSize, b);
                    Batch batch = inputs.fill(shard.x(), shard.y(), order, b * batchSize, length, random);
                    StepOutputs out = run.step(batch);
                    checkOutputs(out, stats.layers());
                    lossSum += (double) out.loss() * length;
                    if (!Float.isFinite(out.loss())) {
                        // The answer is `error diverged` whatever follows: stop here.
                        break training;
                    }
                    for (int l = 0; l < stats.layers(); l++) {
                        stats.update(l, out.batchStats().get(2 * l), out.batchStats().get(2 * l + 1), length);
                    }
                }
            }
            List<Tensor> trained = result(layout, weights, run, stats);
            double computeS = clock.now() - start;
            // docs/models.md: sum(loss * N) / (n * epochs), over every step of every epoch.
            double meanLoss = lossSum / ((double) n * epochs);
            return new TrainingResult(trained, n, meanLoss, computeS);
        }
    }

    /**
     * Between steps: stops on a cancel, or once the deadline has passed (the coordinator has
     * stopped waiting: training on would only spend the battery).
     */
    private void checkGoOn(TrainingTask task, BooleanSupplier cancelled) {
        if (cancelled.getAsBoolean()) {
            throw new CancellationException("cancelled");
        }
        if (clock.now() >= task.deadlineAt()) {
            throw new CancellationException(DEADLINE_PASSED);
        }
    }

    static List<TaskLayout.Entry> entries(List<Tensor> weights) throws ProgramException {
        List<TaskLayout.Entry> out = new ArrayList<>();
        for (Tensor t : weights) {
            TaskLayout.Kind kind;
            if (t.dtype() == DType.FLOAT32) {
                kind = TaskLayout.Kind.FLOAT32;
            } else if (t.dtype() == DType.INT64) {
                kind = TaskLayout.Kind.INT64;
            } else {
                throw new ProgramException("task tensor " + t.name() + " is " + t.dtype().wireName()
                        + "; this device trains float32 weights");
            }
            out.add(new TaskLayout.Entry(t.name(), kind, t.shape()));
        }
        return out;
    }

    private static void checkShard(Shard shard, ProgramSignature sig) throws ProgramException {
        long[] sample = sig.sampleShape();
        List<Long> shape = shard.inputShape();
        boolean same = shape.size() == sample.length;
        for (int i = 0; same && i < sample.length; i++) {
            same = shape.get(i) == sample[i];
        }
        if (!same) {
            throw new ProgramException("the shard's input shape " + shape + " is not the program's "
                    + Arrays.toString(sample));
        }
        if (shard.n() < 1) {
            throw new ProgramException("the shard is empty");
        }
        if (shard.y().length != shard.n() || (long) shard.x().length != shard.n() * StepInputs.numel(sample)) {
            throw new ProgramException("the shard's x and y do not hold " + shard.n() + " samples");
        }
    }

    private static void checkOutputs(StepOutputs out, int layers) throws ProgramException {
        if (out.batchStats().size() != 2 * layers) {
            throw new ProgramException("a step returned " + out.batchStats().size() + " batch statistics, expected "
                    + 2 * layers);
        }
    }

    private static BatchNormStats batchNormStats(TaskLayout layout, List<Tensor> weights) {
        List<TaskLayout.BatchNormLayer> layers = layout.batchNormLayers();
        float[][] mean = new float[layers.size()][];
        float[][] var = new float[layers.size()][];
        double[] tracked = new double[layers.size()];
        long[] pixels = new long[layers.size()];
        for (int l = 0; l < layers.size(); l++) {
            TaskLayout.BatchNormLayer layer = layers.get(l);
            mean[l] = weights.get(layer.mean()).toFloats();
            var[l] = weights.get(layer.var()).toFloats();
            tracked[l] = layer.tracked() < 0 ? 0 : weights.get(layer.tracked()).toDoubles()[0];
            pixels[l] = layer.pixels();
        }
        return new BatchNormStats(mean, var, tracked, pixels);
    }

    /** Every task tensor, in the task's order, with the task's names, dtypes and shapes. */
    private static List<Tensor> result(TaskLayout layout, List<Tensor> weights, TaskRun run, BatchNormStats stats)
            throws Exception {
        Tensor[] out = new Tensor[weights.size()];
        for (int i = 0; i < weights.size(); i++) {
            if (layout.programName(i) != null) {
                Tensor w = weights.get(i);
                out[i] = Tensor.ofFloats(w.name(), w.shape(), run.parameter(layout.programName(i)));
            }
        }
        List<TaskLayout.BatchNormLayer> layers = layout.batchNormLayers();
        for (int l = 0; l < layers.size(); l++) {
            TaskLayout.BatchNormLayer layer = layers.get(l);
            Tensor mean = weights.get(layer.mean());
            Tensor var = weights.get(layer.var());
            out[layer.mean()] = Tensor.ofFloats(mean.name(), mean.shape(), stats.runningMean(l));
            out[layer.var()] = Tensor.ofFloats(var.name(), var.shape(), stats.runningVar(l));
            if (layer.tracked() >= 0) {
                out[layer.tracked()] = scalar(weights.get(layer.tracked()), stats.tracked(l));
            }
        }
        return List.of(out);
    }

    private static Tensor scalar(Tensor like, double value) {
        if (like.dtype() == DType.INT64) {
            ByteBuffer b = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(0, (long) value);
            return Tensor.ofBytes(like.name(), DType.INT64, like.shape(), b.array());
        }
        return Tensor.ofFloats(like.name(), like.shape(), new float[] {(float) value});
    }

    /** Closes every loaded program. */
    @Override
    public void close() {
        programs.close();
    }
}

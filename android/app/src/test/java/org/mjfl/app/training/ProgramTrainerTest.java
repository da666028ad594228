package org.mjfl.app.training;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CancellationException;
import org.junit.jupiter.api.Test;
import org.mjfl.client.net.Clock;
import org.mjfl.client.protocol.DType;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.train.Shard;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

class ProgramTrainerTest {
    private static final long[] SAMPLE = {2, 1, 2};
    private static final Path PROGRAM = Path.of("job.pte");

    /** n samples of two classes that a linear model separates: class = sign of the first value. */
    private static Shard shard(int n) {
        SplittableRandom rng = new SplittableRandom(11);
        float[] x = new float[n * 4];
        long[] y = new long[n];
        for (int i = 0; i < n; i++) {
            y[i] = i % 2;
            for (int d = 0; d < 4; d++) {
                x[i * 4 + d] = (float) (rng.nextDouble() - 0.5);
            }
            x[i * 4] = y[i] == 1 ? 1.5f : -1.5f;
        }
        return new Shard(n, List.of(2L, 1L, 2L), x, y);
    }

    private static List<Tensor> weights(boolean batchNorm, DType tracked) {
        List<Tensor> w = new ArrayList<>();
        w.add(Tensor.ofFloats("fc.weight", new long[] {2, 4}, new float[] {0.1f, 0, 0, 0, -0.1f, 0, 0, 0}));
        if (batchNorm) {
            w.add(Tensor.ofFloats("bn.running_mean", new long[] {2}, new float[] {0, 0}));
            w.add(Tensor.ofFloats("bn.running_var", new long[] {2}, new float[] {1, 1}));
            w.add(tracked == DType.INT64
                    ? Tensor.ofBytes("bn.num_batches_tracked", DType.INT64, new long[] {}, new byte[] {5, 0, 0, 0, 0, 0, 0, 0})
                    : Tensor.ofFloats("bn.num_batches_tracked", new long[] {}, new float[] {5}));
        }
        w.add(Tensor.ofFloats("fc.bias", new long[] {2}, new float[] {0, 0}));
        return w;
    }

    private static final long SEED = 20261127;
    private static final long MB = 1 << 20;

    private static TrainingTask task(Shard shard, List<Tensor> weights, long epochs, long batchSize, double momentum) {
        return task(PROGRAM, shard, weights, epochs, batchSize, momentum, Double.POSITIVE_INFINITY, SEED);
    }

    private static TrainingTask task(Path program, Shard shard, List<Tensor> weights, long epochs, long batchSize,
            double momentum, double deadlineAt, long seed) {
        Message.ModelSpec model = new Message.ModelSpec("fake", List.of(2L, 1L, 2L), 2);
        return new TrainingTask("t-1", "job", 3, model, program, shard, weights, epochs, batchSize, 0.5, momentum,
                0.0, deadlineAt, seed);
    }

    /** A test clock, moved by hand (and by the fakes' hooks). */
    private final double[] now = {1000};
    private final Clock clock = () -> now[0];
    private FakeLoader loader;

    private ProgramTrainer trainer(boolean batchNorm, List<long[]> noise) {
        return trainer(batchNorm, noise, MemoryBudget.UNLIMITED);
    }

    private ProgramTrainer trainer(boolean batchNorm, List<long[]> noise, MemoryBudget memory) {
        loader = new FakeLoader(SAMPLE, 2, 8, batchNorm, noise);
        return new ProgramTrainer(loader, memory, clock);
    }

    @Test
    void batchesFollowTheTaskGeneratorsPermutationAndNoiseItsCounter() throws Exception {
        long[] site = {3};
        ProgramTrainer t = trainer(false, List.of(site));
        Shard shard = shard(10);
        t.train(task(shard, weights(false, null), 2, 4, 0.9), new long[0], () -> false);
        FakeProgram p = loader.all.get(0);
        TaskRandom expected = new TaskRandom(SEED);
        int step = 0;
        for (int e = 0; e < 2; e++) {
            int[] order = expected.permutation(e, 10);
            for (int b = 0; b < 3; b++) {
                int length = Shuffle.batchLength(10, 4, b);
                float[] x = new float[length * 4];
                float[] noise = new float[3 * length];
                for (int k = 0; k < length; k++) {
                    System.arraycopy(shard.x(), order[b * 4 + k] * 4, x, k * 4, 4);
                }
                for (int i = 0; i < noise.length; i++) {
                    noise[i] = expected.nextNoise();
                }
                assertArrayEquals(x, p.inputs.get(step), "epoch " + e + " batch " + b);
                assertArrayEquals(noise, p.noise.get(step), "noise of epoch " + e + " batch " + b);
                step++;
            }
        }
        assertEquals(6, p.inputs.size());
    }

    @Test
    void theSameSeedTrainsTheSameBitsAndAnotherSeedOtherwise() throws Exception {
        List<List<Tensor>> results = new ArrayList<>();
        for (long seed : new long[] {7, 7, 8}) {
            ProgramTrainer t = trainer(false, List.of(new long[] {2, 1}));
            TrainingResult r = t.train(task(PROGRAM, shard(13), weights(false, null), 2, 4, 0.9,
                    Double.POSITIVE_INFINITY, seed), new long[0], () -> false);
            results.add(r.weights());
        }
        assertArrayEquals(results.get(0).get(0).toFloats(), results.get(1).get(0).toFloats());
        assertArrayEquals(results.get(0).get(1).toFloats(), results.get(1).get(1).toFloats());
        assertFalse(Arrays.equals(results.get(0).get(0).toFloats(), results.get(2).get(0).toFloats()));
    }

    @Test
    void trainsEveryEpochOverAFreshPermutationWithAShortLastBatch() throws Exception {
        ProgramTrainer t = trainer(false, List.of(new long[] {3}));
        Shard shard = shard(10);
        TrainingResult r = t.train(task(shard, weights(false, null), 3, 4, 0.9), new long[0], () -> false);
        FakeProgram p = loader.all.get(0);
        assertEquals(List.of(4, 4, 2, 4, 4, 2, 4, 4, 2), p.batchSizes);
        List<long[]> orders = new ArrayList<>();
        for (int e = 0; e < 3; e++) {
            long[] seen = new long[0];
            for (int b = 0; b < 3; b++) {
                long[] l = p.labels.get(3 * e + b);
                long[] joined = Arrays.copyOf(seen, seen.length + l.length);
                System.arraycopy(l, 0, joined, seen.length, l.length);
                seen = joined;
            }
            orders.add(seen);
        }
        // Labels alternate 0, 1 with the index, so each epoch sees five of each.
        for (long[] epoch : orders) {
            assertEquals(10, epoch.length);
            assertEquals(5, Arrays.stream(epoch).sum());
        }
        assertEquals(10, r.samples());
        double expected = 0;
        for (int i = 0; i < p.losses.size(); i++) {
            expected += p.losses.get(i) * p.batchSizes.get(i);
        }
        assertEquals(expected / (10 * 3), r.meanLoss(), 1e-12);
        assertTrue(r.computeS() >= 0);
        assertFalse(Arrays.equals(orders.get(0), orders.get(1)) && Arrays.equals(orders.get(1), orders.get(2)),
                "a fresh permutation every epoch");
    }

    @Test
    void computeTimeRunsFromWritingTheWeightsToReadingThemBackAndLeavesLoadingOut() throws Exception {
        ProgramTrainer t = trainer(false, List.of());
        t.train(task(shard(4), weights(false, null), 1, 2, 0.0), new long[0], () -> false); // loads the program
        FakeProgram p = loader.all.get(0);
        loader.onLoad = () -> now[0] += 100;
        p.onStart = () -> now[0] += 5;
        p.onStep = () -> now[0] += 1;
        TrainingResult r = t.train(task(shard(8), weights(false, null), 2, 4, 0.0), new long[0], () -> false);
        assertEquals(5 + 4, r.computeS(), 1e-9, "the weights' writing and four steps");

        ProgramTrainer fresh = trainer(false, List.of());
        loader.onLoad = () -> now[0] += 100;
        TrainingResult first = fresh.train(task(shard(8), weights(false, null), 1, 4, 0.0), new long[0], () -> false);
        assertEquals(0, first.computeS(), 1e-9, "loading the program is not computing");
    }

    @Test
    void theDeadlineStopsTrainingAtTheNextStepBoundary() {
        ProgramTrainer t = trainer(false, List.of());
        loader.onStep = () -> now[0] += 1;
        // Steps end at 1001, 1002, 1003, ...: the deadline passes during the third.
        TrainingTask task = task(PROGRAM, shard(40), weights(false, null), 5, 4, 0.0, now[0] + 2.5, SEED);
        CancellationException e = assertThrows(CancellationException.class,
                () -> t.train(task, new long[0], () -> false));
        assertEquals(ProgramTrainer.DEADLINE_PASSED, e.getMessage());
        assertEquals(3, loader.all.get(0).batchSizes.size(), "the third step ran past the deadline, no fourth began");
        assertEquals(1, loader.all.get(0).runsClosed, "the run is closed at the deadline too");
    }

    @Test
    void aPassedDeadlineStopsTrainingBeforeTheFirstStep() {
        ProgramTrainer t = trainer(false, List.of());
        CancellationException e = assertThrows(CancellationException.class, () -> t.train(
                task(PROGRAM, shard(8), weights(false, null), 1, 4, 0.0, now[0], SEED), new long[0], () -> false));
        assertEquals(ProgramTrainer.DEADLINE_PASSED, e.getMessage());
        assertEquals(0, loader.all.get(0).batchSizes.size());
    }

    @Test
    void everyTaskRunIsClosedOnSuccessFailureAndCancellation() throws Exception {
        ProgramTrainer t = trainer(false, List.of());
        t.train(task(shard(8), weights(false, null), 1, 4, 0.9), new long[0], () -> false);
        FakeProgram p = loader.all.get(0);
        assertEquals(1, p.runsClosed, "success");

        p.onStep = () -> {
            throw new IllegalStateException("the runtime failed");
        };
        assertThrows(IllegalStateException.class,
                () -> t.train(task(shard(8), weights(false, null), 1, 4, 0.9), new long[0], () -> false));
        assertEquals(2, p.runsClosed, "failure");
        p.onStep = () -> { };

        assertThrows(CancellationException.class,
                () -> t.train(task(shard(8), weights(false, null), 1, 4, 0.9), new long[0], () -> true));
        assertEquals(3, p.runsClosed, "cancellation");

        p.nanAt = p.losses.size();
        assertTrue(Double.isNaN(t.train(task(shard(8), weights(false, null), 1, 4, 0.9), new long[0], () -> false)
                .meanLoss()));
        assertEquals(4, p.runsClosed, "divergence");
        assertEquals(4, p.runs);
        assertFalse(p.closed, "the program stays loaded");
    }

    @Test
    void writesTheTaskWeightsBeforeTheFirstStepAndReturnsTheTrainedOnes() throws Exception {
        ProgramTrainer t = trainer(false, List.of());
        List<Tensor> w = weights(false, null);
        TrainingResult r = t.train(task(shard(16), w, 2, 4, 0.0), new long[0], () -> false);
        FakeProgram p = loader.all.get(0);
        assertEquals(1, p.starts.size());
        assertArrayEquals(w.get(0).toFloats(), p.starts.get(0).get("model.fc.weight"));
        assertArrayEquals(w.get(1).toFloats(), p.starts.get(0).get("model.fc.bias"));
        assertEquals(2, r.weights().size());
        for (int i = 0; i < w.size(); i++) {
            assertTrue(w.get(i).sameSpec(r.weights().get(i)), r.weights().get(i).toString());
        }
        assertArrayEquals(p.params.get("model.fc.weight"), r.weights().get(0).toFloats());
        assertFalse(Arrays.equals(w.get(0).toFloats(), r.weights().get(0).toFloats()));
    }

    @Test
    void theLossFallsOverRoundsAndEachTaskStartsItsOwnOptimizer() throws Exception {
        ProgramTrainer t = trainer(false, List.of());
        List<Tensor> w = weights(false, null);
        double first = Double.NaN;
        double last = Double.NaN;
        for (int round = 0; round < 4; round++) {
            TrainingResult r = t.train(task(shard(32), w, 1, 8, 0.9), new long[0], () -> false);
            w = r.weights();
            if (round == 0) {
                first = r.meanLoss();
            }
            last = r.meanLoss();
        }
        assertTrue(last < first / 2, first + " -> " + last);
        assertEquals(1, loader.all.size(), "the program is loaded once");
        assertEquals(4, loader.all.get(0).starts.size(), "one optimizer per task");
    }

    @Test
    void batchNormStatisticsFollowEveryStep() throws Exception {
        for (DType trackedType : new DType[] {DType.FLOAT32, DType.INT64}) {
            ProgramTrainer t = trainer(true, List.of());
            List<Tensor> w = weights(true, trackedType);
            Shard shard = shard(6);
            TrainingResult r = t.train(task(shard, w, 2, 4, 0.0), new long[] {2}, () -> false);
            FakeProgram p = loader.all.get(0);
            float[] mean = {0, 0};
            float[] var = {1, 1};
            BatchNormStats expected = new BatchNormStats(new float[][] {mean}, new float[][] {var}, new double[] {5},
                    new long[] {2});
            for (int s = 0; s < p.outputs.size(); s++) {
                List<float[]> stats = p.outputs.get(s).batchStats();
                expected.update(0, stats.get(0), stats.get(1), p.batchSizes.get(s));
            }
            assertEquals(4, p.outputs.size());
            assertEquals(List.of("fc.weight", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked", "fc.bias"),
                    r.weights().stream().map(Tensor::name).toList());
            assertArrayEquals(mean, r.weights().get(1).toFloats());
            assertArrayEquals(var, r.weights().get(2).toFloats());
            assertEquals(trackedType, r.weights().get(3).dtype());
            assertEquals(9.0, r.weights().get(3).toDoubles()[0]);
            assertFalse(Arrays.equals(new float[] {0, 0}, mean));
        }
    }

    @Test
    void cancellationIsCheckedBeforeEveryStep() {
        ProgramTrainer t = trainer(false, List.of());
        int[] asked = {0};
        assertThrows(CancellationException.class,
                () -> t.train(task(shard(40), weights(false, null), 5, 4, 0.0), new long[0], () -> ++asked[0] > 3));
        assertEquals(3, loader.all.get(0).batchSizes.size());
    }

    @Test
    void aNonFiniteLossEndsTrainingAndTheMeanLossSaysSo() throws Exception {
        ProgramTrainer t = trainer(false, List.of());
        t.train(task(shard(8), weights(false, null), 1, 4, 0.0), new long[0], () -> false);
        loader.all.get(0).nanAt = loader.all.get(0).losses.size() + 1;
        TrainingResult r = t.train(task(shard(40), weights(false, null), 3, 4, 0.0), new long[0], () -> false);
        assertTrue(Double.isNaN(r.meanLoss()));
        assertEquals(2 + 2, loader.all.get(0).batchSizes.size(), "stops after the step that diverged");
    }

    @Test
    void refusesBatchesAboveTheProgramsBoundAndMismatchedWeights() {
        ProgramTrainer t = trainer(false, List.of());
        ProgramException big = assertThrows(ProgramException.class,
                () -> t.train(task(shard(40), weights(false, null), 1, 9, 0.0), new long[0], () -> false));
        assertTrue(big.getMessage().contains("batch_size"), big.getMessage());
        List<Tensor> wrong = List.of(Tensor.ofFloats("fc.weight", new long[] {4, 2}, new float[8]),
                Tensor.ofFloats("fc.bias", new long[] {2}, new float[2]));
        assertThrows(ProgramException.class, () -> t.train(task(shard(4), wrong, 1, 2, 0.0), new long[0], () -> false));
        Shard otherShape = new Shard(2, List.of(4L), new float[8], new long[2]);
        assertThrows(ProgramException.class,
                () -> t.train(task(otherShape, weights(false, null), 1, 2, 0.0), new long[0], () -> false));
    }

    /** A phone's budget: {@code capacity} less what the open programs of this test's loader plan. */
    private MemoryBudget phone(long capacity) {
        return () -> capacity - loader.openPlanned();
    }

    private static TrainingTask on(String program, double momentum) {
        return task(Path.of(program), shard(4), weights(false, null), 1, 2, momentum, Double.POSITIVE_INFINITY, SEED);
    }

    private TrainingResult trainOn(ProgramTrainer t, String program) throws Exception {
        return t.train(on(program, 0.0), new long[0], () -> false);
    }

    /** What {@code task} needs when its program is not loaded, by the loader's signature and file size. */
    private MemoryNeed need(TrainingTask task) throws Exception {
        return MemoryNeed.of(loader.read(task.program()), false, loader.fileBytes(task.program()), task);
    }

    @Test
    void oneProgramStaysLoadedAndAnotherJobsTaskClosesItFirst() throws Exception {
        ProgramTrainer t = trainer(false, List.of());
        trainOn(t, "a.pte");
        trainOn(t, "a.pte");
        assertEquals(List.of(Path.of("a.pte")), loader.loads, "the program in use stays loaded");
        trainOn(t, "b.pte");
        assertTrue(loader.byPath.get(Path.of("a.pte")).closed, "docs/models.md: one program loaded");
        trainOn(t, "a.pte");
        assertEquals(List.of(true, true, false), loader.all.stream().map(p -> p.closed).toList());
        t.close();
        assertTrue(loader.all.stream().allMatch(p -> p.closed));
    }

    @Test
    void aTasksNeedCountsTheProgramFileMomentumAndTheJavaCopies() throws Exception {
        trainer(false, List.of());
        loader.planned.put(Path.of("a.pte"), 100 * MB);
        loader.fileBytes.put(Path.of("a.pte"), 7 * MB);
        TrainingTask plain = on("a.pte", 0.0);
        MemoryNeed n = need(plain);
        ProgramSignature sig = loader.read(Path.of("a.pte"));
        long parameters = sig.parameterShapes().stream().mapToLong(Tensor::numel).sum();
        long weights = plain.weights().stream().mapToLong(Tensor::numel).sum();
        assertEquals(100 * MB, n.plannedBytes());
        assertEquals(7 * MB, n.programBytes());
        assertEquals(0, n.momentumBytes(), "plain SGD keeps no buffer");
        assertEquals(3 * 4 * weights, n.weightCopyBytes(), "float copies in, trained copies out, the result's");
        long sample = Tensor.numel(SAMPLE);
        assertEquals(2 * (2 * sample * 4 + 2 * 8), n.batchBytes(), "a batch of 2 in Java and as input tensors");
        assertEquals(4 * parameters, need(on("a.pte", 0.9)).momentumBytes(), "momentum: a float copy of the parameters");
        MemoryNeed loaded = MemoryNeed.of(sig, true, 7 * MB, plain);
        assertEquals(0, loaded.plannedBytes() + loaded.programBytes(), "a loaded program's memory is in use already");
        assertEquals(n.total() - 107 * MB, loaded.total());
    }

    @Test
    void aTaskThatCannotFitIsRefusedBeforeLoadingNamingEveryPart() throws Exception {
        trainer(false, List.of());
        loader.planned.put(Path.of("a.pte"), 200 * MB);
        loader.fileBytes.put(Path.of("a.pte"), 15 * MB);
        TrainingTask task = on("a.pte", 0.9);
        long exact = need(task).total();
        // The program alone (its planned memory, the old check) would fit; with its file and the rest it does not.
        ProgramTrainer t = new ProgramTrainer(loader, () -> exact - 1, clock);
        ProgramException e = assertThrows(ProgramException.class, () -> t.train(task, new long[0], () -> false));
        assertEquals("task needs " + MemoryNeed.up(exact) + " MB (planned 200 MB + program 15 MB + momentum 1 MB"
                + " + weights 1 MB + batches 1 MB); the phone has " + MemoryNeed.down(exact - 1) + " MB available",
                e.getMessage());
        assertEquals(List.of(), loader.loads, "nothing was loaded");
        ProgramTrainer fits = new ProgramTrainer(loader, () -> exact, clock);
        fits.train(task, new long[0], () -> false);
        assertEquals(List.of(Path.of("a.pte")), loader.loads);
    }

    @Test
    void theLoadedProgramsMemoryCountsAsAvailableAndARefusalClosesNothing() throws Exception {
        ProgramTrainer t = trainer(false, List.of(), phone(400 * MB));
        loader.planned.put(Path.of("small.pte"), 150 * MB);
        loader.planned.put(Path.of("big.pte"), 390 * MB);
        loader.planned.put(Path.of("huge.pte"), 400 * MB);
        trainOn(t, "small.pte");
        ProgramException e = assertThrows(ProgramException.class, () -> trainOn(t, "huge.pte"));
        assertTrue(e.getMessage().startsWith("task needs 401 MB (planned 400 MB + weights 1 MB + batches 1 MB);"
                + " the phone has 400 MB available"), e.getMessage());
        assertFalse(loader.byPath.get(Path.of("small.pte")).closed, "a refusal closes nothing");
        trainOn(t, "big.pte"); // 250 MB free + small's 150 MB once it is closed
        assertTrue(loader.byPath.get(Path.of("small.pte")).closed);
    }

    @Test
    void theJavaCopiesMustFitTheHeapToo() throws Exception {
        trainer(false, List.of());
        TrainingTask task = on("a.pte", 0.0);
        long java = need(task).javaBytes();
        MemoryBudget tightHeap = new MemoryBudget() {
            @Override
            public long availableBytes() {
                return Long.MAX_VALUE;
            }

            @Override
            public long heapBytes() {
                return java - 1;
            }
        };
        ProgramException e = assertThrows(ProgramException.class,
                () -> new ProgramTrainer(loader, tightHeap, clock).train(task, new long[0], () -> false));
        assertEquals("task needs 1 MB of Java heap for its weights and batches; the app's heap has 0 MB free",
                e.getMessage());
        assertEquals(List.of(), loader.loads);
    }
}

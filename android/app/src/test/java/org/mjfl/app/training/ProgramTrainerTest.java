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

    private TrainingResult trainOn(ProgramTrainer t, String program) throws Exception {
        return t.train(task(Path.of(program), shard(4), weights(false, null), 1, 2, 0.0, Double.POSITIVE_INFINITY, SEED),
                new long[0], () -> false);
    }

    @Test
    void withMemoryToSpareAFewProgramsStayLoadedAndTheRestAreClosed() throws Exception {
        ProgramTrainer t = trainer(false, List.of());
        for (int job = 0; job <= LoadedPrograms.MAX_PROGRAMS; job++) {
            trainOn(t, "job" + job + ".pte");
        }
        assertTrue(loader.all.get(0).closed);
        assertFalse(loader.all.get(1).closed);
        trainOn(t, "job1.pte");
        assertEquals(LoadedPrograms.MAX_PROGRAMS + 1, loader.loads.size(), "job1 was still loaded");
        t.close();
        assertTrue(loader.all.stream().allMatch(p -> p.closed));
    }

    @Test
    void programsStayLoadedOnlyWhileTheirPlannedMemoryFitsLeastRecentlyUsedOutFirst() throws Exception {
        ProgramTrainer t = trainer(false, List.of(), phone(700 * MB));
        for (String job : new String[] {"a", "b", "c", "d"}) {
            loader.planned.put(Path.of(job + ".pte"), 300 * MB);
        }
        trainOn(t, "a.pte");
        trainOn(t, "b.pte");
        assertEquals(List.of(false, false), loader.all.stream().map(p -> p.closed).toList(), "two fit in 700 MB");
        trainOn(t, "c.pte");
        assertEquals(List.of(true, false, false), loader.all.stream().map(p -> p.closed).toList(), "a made room for c");
        trainOn(t, "b.pte");
        trainOn(t, "d.pte");
        assertTrue(loader.byPath.get(Path.of("c.pte")).closed, "c was used least recently");
        assertFalse(loader.byPath.get(Path.of("b.pte")).closed);
        assertEquals(List.of("a.pte", "b.pte", "c.pte", "d.pte"), loader.loads.stream().map(Path::toString).toList());
    }

    @Test
    void aProgramThatCannotFitIsRefusedBeforeLoadingNamingBothFigures() throws Exception {
        ProgramTrainer t = trainer(false, List.of(), () -> 210 * MB);
        loader.planned.put(PROGRAM, 362 * MB);
        ProgramException e = assertThrows(ProgramException.class,
                () -> t.train(task(shard(4), weights(false, null), 1, 2, 0.0), new long[0], () -> false));
        assertEquals("program needs 362 MB of planned memory; the phone has 210 MB available", e.getMessage());
        assertEquals(List.of(PROGRAM), loader.reads);
        assertEquals(List.of(), loader.loads, "nothing was loaded");

        // What loaded programs hold counts as available: closing them would free it.
        ProgramTrainer u = trainer(false, List.of(), phone(400 * MB));
        loader.planned.put(Path.of("small.pte"), 150 * MB);
        loader.planned.put(Path.of("big.pte"), 390 * MB);
        loader.planned.put(Path.of("huge.pte"), 401 * MB);
        trainOn(u, "small.pte");
        e = assertThrows(ProgramException.class, () -> trainOn(u, "huge.pte"));
        assertEquals("program needs 401 MB of planned memory; the phone has 400 MB available", e.getMessage());
        assertFalse(loader.byPath.get(Path.of("small.pte")).closed, "a refusal closes nothing");
        trainOn(u, "big.pte");
        assertTrue(loader.byPath.get(Path.of("small.pte")).closed);
    }

    @Test
    void afterATaskIdleProgramsAreClosedWhileMemoryIsShort() throws Exception {
        long[] capacity = {1000 * MB};
        ProgramTrainer t = trainer(false, List.of(), () -> capacity[0] - loader.openPlanned());
        for (String job : new String[] {"a", "b", "c"}) {
            loader.planned.put(Path.of(job + ".pte"), 200 * MB);
        }
        trainOn(t, "a.pte");
        trainOn(t, "b.pte");
        trainOn(t, "c.pte");
        capacity[0] = 500 * MB; // other apps took memory: 100 MB short
        trainOn(t, "c.pte");
        assertEquals(List.of(true, false, false), loader.all.stream().map(p -> p.closed).toList());
        capacity[0] = 0;
        trainOn(t, "c.pte");
        assertEquals(List.of(true, true, false), loader.all.stream().map(p -> p.closed).toList(),
                "the program in use stays loaded");
    }
}

package org.mjfl.app.selftest;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.UnaryOperator;
import org.mjfl.app.training.FakeProgramLoader;
import org.mjfl.app.training.MemoryBudget;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.client.net.Clock;
import org.mjfl.client.protocol.Codec;
import org.mjfl.client.protocol.DType;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Sha256;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.train.TrainingResult;

/**
 * Golden sets for the tests, written as golden.py writes them, of softmax-regression cases that
 * {@link FakeProgramLoader} runs; the expected result is that runtime's own (its numbers are
 * then exact), or whatever a test makes of it.
 */
final class GoldenFiles {
    static final long[] SAMPLE = {2, 1, 2};
    static final int CLASSES = 3;
    static final long PLANNED = 3 << 20;

    private GoldenFiles() {}

    /** A set of the named cases, each with expected weights passed through {@code edit}. */
    static Path write(Path set, List<String> names, double tolerance, UnaryOperator<List<Tensor>> edit)
            throws Exception {
        Files.createDirectories(set);
        for (int i = 0; i < names.size(); i++) {
            writeCase(set.resolve(names.get(i)), names.get(i), 100 + i, edit);
        }
        JsonObject m = new JsonObject();
        m.addProperty("format", GoldenSet.FORMAT);
        m.addProperty("key", "test-set");
        m.addProperty("tolerance", tolerance);
        JsonArray cases = new JsonArray();
        names.forEach(cases::add);
        m.add("cases", cases);
        Files.writeString(set.resolve("manifest.json"), m.toString());
        return set;
    }

    static void writeCase(Path folder, String name, long seed, UnaryOperator<List<Tensor>> edit) throws Exception {
        Files.createDirectories(folder);
        byte[] program = FakeProgramLoader.describe(SAMPLE, CLASSES, 4, PLANNED);
        Files.write(folder.resolve("program.pte"), program);
        int n = 10;
        float[] x = new float[n * 4];
        long[] y = new long[n];
        java.util.SplittableRandom rng = new java.util.SplittableRandom(seed);
        for (int i = 0; i < x.length; i++) {
            x[i] = (float) rng.nextDouble();
        }
        for (int i = 0; i < n; i++) {
            y[i] = rng.nextInt(CLASSES);
        }
        Tensor tx = Tensor.ofFloats("x", new long[] {n, 2, 1, 2}, x);
        ByteBuffer yb = ByteBuffer.allocate(8 * n).order(ByteOrder.LITTLE_ENDIAN);
        for (long v : y) {
            yb.putLong(v);
        }
        Tensor ty = Tensor.ofBytes("y", DType.INT64, new long[] {n}, yb.array());
        String programSha = Sha256.of(program);
        String shardSha = Sha256.of(tx.data(), ty.data());
        String job = "golden-" + name;
        Message.ModelSpec model = new Message.ModelSpec("softmax", List.of(2L, 1L, 2L), CLASSES);
        Message.Provision provision = new Message.Provision(job, model, programSha, shardSha, List.of(tx, ty));
        float[] w = new float[CLASSES * 4];
        for (int i = 0; i < w.length; i++) {
            w[i] = (float) (rng.nextDouble() - 0.5);
        }
        List<Tensor> weights = List.of(Tensor.ofFloats("fc.weight", new long[] {CLASSES, 4}, w),
                Tensor.ofFloats("fc.bias", new long[] {CLASSES}, new float[CLASSES]));
        Message.Task task = new Message.Task(job, job, 0, 2, 4, 0.5, 0.9, 1e-3, null, programSha, shardSha, seed, weights);
        write(folder.resolve("provision.mjfl"), provision);
        write(folder.resolve("task.mjfl"), task);
        // Trained here, from the case as the self-test reads it (a placeholder answer until then).
        write(folder.resolve("expected.mjfl"), new Message.Result(job, job, 0, n, 1.0,
                new Message.Timing(0, 0, null), null, weights));

        GoldenCase c = GoldenCase.read(folder, name);
        TrainingResult r;
        try (ProgramTrainer t = new ProgramTrainer(new FakeProgramLoader(), MemoryBudget.UNLIMITED, Clock.SYSTEM)) {
            r = t.train(c.trainingTask(c.program()), new long[0], () -> false);
        }
        List<Tensor> trained = edit.apply(new ArrayList<>(r.weights()));
        write(folder.resolve("expected.mjfl"), new Message.Result(job, job, 0, n, r.meanLoss(),
                new Message.Timing(0, r.computeS(), null), null, trained));
    }

    /** {@code tensors} with {@code name}'s value {@code index} moved by {@code delta}. */
    static List<Tensor> nudge(List<Tensor> tensors, String name, int index, float delta) {
        List<Tensor> out = new ArrayList<>();
        for (Tensor t : tensors) {
            if (t.name().equals(name)) {
                float[] v = t.toFloats();
                v[index] += delta;
                t = Tensor.ofFloats(t.name(), t.shape(), v);
            }
            out.add(t);
        }
        return out;
    }

    private static void write(Path file, Message.Binary m) throws IOException {
        ByteBuffer b = Codec.encodeBinary(m, Codec.VERSION);
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        Files.write(file, bytes);
    }

    static String text(Path p) throws IOException {
        return Files.readString(p, StandardCharsets.UTF_8);
    }
}

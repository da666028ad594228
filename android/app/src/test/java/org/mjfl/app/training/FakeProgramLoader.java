package org.mjfl.app.training;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A runtime for the JVM: loads {@link FakeProgram}s (softmax regression with PyTorch's SGD) from
 * program files that describe one in JSON, {@code {"fake_program": {"sample_shape": [2, 1, 2],
 * "classes": 2, "max_batch": 8, "planned_bytes": 4096}}} ({@link #describe}). The self-test runs
 * on it on the JVM ({@code org.mjfl.app.selftest.SelfTestMain}), where no ExecuTorch runtime is;
 * a double of ExecuTorch's runtime takes its place through the same {@link ProgramTrainer.Loader}.
 */
public final class FakeProgramLoader implements ProgramTrainer.Loader {
    public FakeProgramLoader() {}

    /** The bytes of a program file describing a fake program. */
    public static byte[] describe(long[] sampleShape, int classes, int maxBatch, long plannedBytes) {
        JsonObject p = new JsonObject();
        JsonArray shape = new JsonArray();
        for (long d : sampleShape) {
            shape.add(d);
        }
        p.add("sample_shape", shape);
        p.addProperty("classes", classes);
        p.addProperty("max_batch", maxBatch);
        p.addProperty("planned_bytes", plannedBytes);
        JsonObject o = new JsonObject();
        o.add("fake_program", p);
        return o.toString().getBytes(StandardCharsets.UTF_8);
    }

    @Override
    public ProgramSignature read(Path program) throws IOException, ProgramException {
        JsonObject p;
        try {
            p = JsonParser.parseString(Files.readString(program, StandardCharsets.UTF_8)).getAsJsonObject()
                    .getAsJsonObject("fake_program");
        } catch (RuntimeException e) {
            throw new ProgramException("not a fake program: " + e.getMessage());
        }
        if (p == null) {
            throw new ProgramException("not a fake program (no fake_program object)");
        }
        JsonArray shape = p.getAsJsonArray("sample_shape");
        long[] sample = new long[shape.size()];
        for (int i = 0; i < sample.length; i++) {
            sample[i] = shape.get(i).getAsLong();
        }
        List<long[]> noise = new ArrayList<>();
        return FakeProgram.signature(sample, p.get("classes").getAsInt(), p.get("max_batch").getAsInt(), false, noise,
                p.get("planned_bytes").getAsLong());
    }

    @Override
    public TrainingProgram load(Path program, ProgramSignature signature) {
        return new FakeProgram(signature, (int) signature.parameterShapes().get(0)[0], false);
    }
}

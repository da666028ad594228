package org.mjfl.app.selftest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mjfl.app.training.Batch;
import org.mjfl.app.training.FakeProgramLoader;
import org.mjfl.app.training.MemoryBudget;
import org.mjfl.app.training.ProgramSignature;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.app.training.TrainingProgram;
import org.mjfl.client.net.Clock;
import org.mjfl.client.protocol.Tensor;

class SelfTestTest {
    @TempDir
    Path tmp;

    private final List<String> lines = new ArrayList<>();
    private final List<String> resets = new ArrayList<>();
    /** A phone at 87%, charging, thermal light. */
    private final JsonObject state = JsonParser.parseString(
            "{\"battery_pct\":87,\"charging\":true,\"thermal_status\":1}").getAsJsonObject();

    private SelfTest.Outcome run(ProgramTrainer.Loader runtime, Path set) {
        MemoryProbe probe = new MemoryProbe() {
            @Override
            public boolean resetPeak() {
                resets.add("reset");
                return true;
            }

            @Override
            public long peakBytes() {
                return 300L << 20;
            }
        };
        SelfTest.Device device = new SelfTest.Device(runtime, MemoryBudget.UNLIMITED, probe, state::deepCopy, Clock.SYSTEM);
        return new SelfTest(device, lines::add).run("r1", set, tmp.resolve("work"));
    }

    private List<JsonObject> parsed() {
        List<JsonObject> out = new ArrayList<>();
        for (String l : lines) {
            assertFalse(l.contains("\n"), "one line each");
            out.add(JsonParser.parseString(l).getAsJsonObject());
        }
        return out;
    }

    private Path set(List<String> names, UnaryOperator<List<Tensor>> edit) throws Exception {
        return GoldenFiles.write(tmp.resolve("set"), names, 1e-4, edit);
    }

    @Test
    void aRuntimeThatTrainsAsExpectedPassesEveryCaseAndSaysSoLineByLine() throws Exception {
        SelfTest.Outcome outcome = run(new FakeProgramLoader(), set(List.of("a", "b"), w -> w));
        assertTrue(outcome.passed());
        assertEquals(List.of("a", "b"), outcome.passedCases());
        List<JsonObject> l = parsed();
        assertEquals(List.of("start", "case", "case", "done"), l.stream().map(o -> o.get("event").getAsString()).toList());
        for (JsonObject o : l) {
            assertEquals("r1", o.get("run").getAsString());
            assertEquals(state, o.getAsJsonObject("device_state"));
        }
        assertEquals("test-set", l.get(0).get("set").getAsString());
        assertEquals(1e-4, l.get(0).get("tolerance").getAsDouble());
        JsonObject a = l.get(1);
        assertEquals("a", a.get("case").getAsString());
        assertTrue(a.get("pass").getAsBoolean());
        assertEquals(0.0, a.get("max_rel_diff").getAsDouble());
        assertEquals(0.0, a.get("loss_rel_diff").getAsDouble());
        assertEquals(6, a.get("steps").getAsInt()); // 10 samples in batches of 4 (4, 4, 2), two epochs
        assertTrue(a.get("step_ms").getAsDouble() >= 0 && a.get("first_step_ms").getAsDouble() >= 0);
        assertEquals(3.0, a.get("planned_mb").getAsDouble());
        assertEquals(300.0, a.get("peak_mb").getAsDouble());
        assertTrue(a.get("peak_reset").getAsBoolean());
        assertTrue(a.get("error").isJsonNull());
        assertEquals(2, resets.size(), "a new peak per case");
        JsonObject done = l.get(3);
        assertTrue(done.get("pass").getAsBoolean());
        assertEquals(2, done.get("passed").getAsInt());
        assertEquals(0, done.getAsJsonArray("failed").size());
        assertTrue(Files.exists(tmp.resolve("work")) && !Files.exists(tmp.resolve("work/a.pte")), "copies go");
    }

    @Test
    void weightsOffByMoreThanTheToleranceFailTheCaseAndNameTheTensor() throws Exception {
        // fc.bias starts at zero and moves by about 0.1: 1e-3 off is 1e-2 relative.
        SelfTest.Outcome outcome = run(new FakeProgramLoader(),
                set(List.of("a", "b"), w -> GoldenFiles.nudge(w, "fc.bias", 1, 1e-3f)));
        assertFalse(outcome.passed());
        List<JsonObject> l = parsed();
        JsonObject a = l.get(1);
        assertFalse(a.get("pass").getAsBoolean());
        assertEquals("fc.bias", a.get("worst").getAsString());
        assertTrue(a.get("max_rel_diff").getAsDouble() > 1e-3, a.toString());
        assertTrue(a.get("error").isJsonNull(), "a wrong answer is not an error");
        JsonObject done = l.get(3);
        assertFalse(done.get("pass").getAsBoolean());
        assertEquals(List.of("a", "b"), outcome.failedCases());
        assertEquals("[\"a\",\"b\"]", done.getAsJsonArray("failed").toString());
    }

    @Test
    void roundingWithinTheTolerancePasses() throws Exception {
        SelfTest.Outcome outcome = run(new FakeProgramLoader(),
                set(List.of("a"), w -> GoldenFiles.nudge(w, "fc.weight", 0, 1e-6f)));
        assertTrue(outcome.passed(), lines.toString());
        double d = parsed().get(1).get("max_rel_diff").getAsDouble();
        assertTrue(d > 0 && d < 1e-4, "" + d);
    }

    @Test
    void aRuntimeThatCannotLoadIsAnErrorOfEachCaseAndTheOthersStillRun() throws Exception {
        ProgramTrainer.Loader broken = new ProgramTrainer.Loader() {
            @Override
            public ProgramSignature read(Path program) throws java.io.IOException, org.mjfl.app.training.ProgramException {
                return new FakeProgramLoader().read(program);
            }

            @Override
            public TrainingProgram load(Path program, ProgramSignature signature) {
                throw new UnsatisfiedLinkError("dlopen failed: library \"libexecutorch.so\" not found");
            }
        };
        SelfTest.Outcome outcome = run(broken, set(List.of("a", "b"), w -> w));
        assertFalse(outcome.passed());
        List<JsonObject> l = parsed();
        assertEquals(4, l.size());
        JsonObject a = l.get(1);
        assertFalse(a.get("pass").getAsBoolean());
        assertEquals("UnsatisfiedLinkError: dlopen failed: library \"libexecutorch.so\" not found",
                a.get("error").getAsString());
        assertTrue(a.get("max_rel_diff").isJsonNull() && a.get("step_ms").isJsonNull());
        assertEquals(3.0, a.get("planned_mb").getAsDouble(), "read before loading");
        assertEquals(0, a.get("steps").getAsInt());
    }

    @Test
    void aNanLossNeverPasses() throws Exception {
        FakeProgramLoader fake = new FakeProgramLoader();
        ProgramTrainer.Loader nan = new ProgramTrainer.Loader() {
            @Override
            public ProgramSignature read(Path program) throws java.io.IOException, org.mjfl.app.training.ProgramException {
                return fake.read(program);
            }

            @Override
            public TrainingProgram load(Path program, ProgramSignature signature) {
                TrainingProgram p = fake.load(program, signature);
                return new TrainingProgram() {
                    @Override
                    public ProgramSignature signature() {
                        return p.signature();
                    }

                    @Override
                    public TaskRun start(Map<String, float[]> w, double lr, double m, double wd) throws Exception {
                        TaskRun run = p.start(w, lr, m, wd);
                        return new TaskRun() {
                            @Override
                            public StepOutputs step(Batch batch) throws Exception {
                                return new StepOutputs(Float.NaN, run.step(batch).batchStats());
                            }

                            @Override
                            public float[] parameter(String name) throws Exception {
                                return run.parameter(name);
                            }

                            @Override
                            public void close() {
                                run.close();
                            }
                        };
                    }

                    @Override
                    public void close() {
                        p.close();
                    }
                };
            }
        };
        SelfTest.Outcome outcome = run(nan, set(List.of("a"), w -> w));
        assertFalse(outcome.passed());
        JsonObject a = parsed().get(1);
        assertTrue(a.get("loss_rel_diff").isJsonNull(), "NaN is written as null");
        assertFalse(a.get("pass").getAsBoolean());
    }

    @Test
    void aProgramCopiedIncompletelyIsNamed() throws Exception {
        Path s = set(List.of("a"), w -> w);
        Files.writeString(s.resolve("a/program.pte"), "{\"fake_program\": {}}");
        run(new FakeProgramLoader(), s);
        String error = parsed().get(1).get("error").getAsString();
        assertTrue(error.startsWith("a: program.pte is not the program the provision names"), error);
    }

    @Test
    void aSetThatIsNotThereGivesOnlyTheDoneLineWithTheReason() {
        SelfTest.Outcome outcome = run(new FakeProgramLoader(), tmp.resolve("nowhere"));
        assertFalse(outcome.passed());
        List<JsonObject> l = parsed();
        assertEquals(1, l.size());
        assertEquals("done", l.get(0).get("event").getAsString());
        assertFalse(l.get(0).get("pass").getAsBoolean());
        assertTrue(l.get(0).get("error").getAsString().startsWith("no golden set at "), l.get(0).toString());
    }

    @Test
    void aSetOfAnotherFormatIsRefusedWithWhatToDo() throws Exception {
        Path s = set(List.of("a"), w -> w);
        Files.writeString(s.resolve("manifest.json"), "{\"format\": 2, \"key\": \"k\", \"tolerance\": 1e-4, \"cases\": [\"a\"]}");
        run(new FakeProgramLoader(), s);
        assertTrue(parsed().get(0).get("error").getAsString().contains("golden set format 2"), lines.toString());
    }

    @Test
    void theBusyLineNamesTheRunInProgress() {
        JsonObject o = JsonParser.parseString(SelfTest.busy("r2", "r1")).getAsJsonObject();
        assertEquals("busy", o.get("event").getAsString());
        assertEquals("r2", o.get("run").getAsString());
        assertEquals("r1", o.get("running").getAsString());
        assertNull(o.get("pass"));
    }
}

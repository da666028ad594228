package org.mjfl.app.selftest;

import com.google.gson.JsonArray;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.mjfl.app.training.MemoryBudget;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.client.net.Clock;
import org.mjfl.client.train.TrainingResult;

/**
 * The app's self-test, the phone's side of the first-day check (docs/phones.md, "First-day
 * check"): trains every case of a golden set as a run trains a task ({@link ProgramTrainer} on
 * the device's runtime and memory budget) and compares the trained weights and mean loss with
 * the Python runtime's ({@link Comparison}, within the set's tolerance).
 *
 * <p>It reports in JSON lines, one object a line, which the Android entry writes to logcat
 * under {@link #TAG} and mjfl reads back over adb ({@code mjfl/device/phones/selftest.py}):
 *
 * <pre>
 * {"event":"start","run":R,"set":KEY,"cases":[...],"tolerance":1e-4,"device_state":{...}}
 * {"event":"case","run":R,"case":NAME,"pass":B,"max_rel_diff":D,"worst":TENSOR,"loss_rel_diff":D,
 *  "steps":N,"step_ms":MEDIAN,"first_step_ms":MS,"compute_s":S,"planned_mb":MB,"peak_mb":MB,
 *  "peak_reset":B,"device_state":{...},"error":null|TEXT}                     one per case, in order
 * {"event":"done","run":R,"pass":B,"passed":N,"failed":[NAMES],"elapsed_s":S,"device_state":{...},
 *  "error":null|TEXT}
 * {"event":"busy","run":R,"running":OTHER}      instead of all that, while another run goes on
 * </pre>
 *
 * {@code device_state} is a result's (protocol.md 5.5: battery_pct, charging, thermal_status);
 * {@code peak_mb} is the process's resident peak while the case trained ({@link MemoryProbe};
 * since the process started when {@code peak_reset} is false); {@code planned_mb} the program's
 * planned memory; numbers that are not finite are null. A set that cannot be read gives only
 * the done line, with its error. Plain Java: it runs on the JVM too. Its file access keeps to
 * the java.nio.file API of Android 8.0, API 26 ({@code Files.readString} came with API 36, and the
 * app's core library desugaring, desugar_jdk_libs without its nio flavour, adds none of
 * java.nio.file).
 */
public final class SelfTest {
    /** The logcat tag of the self-test's lines (the app's other lines use {@code MJFL}). */
    public static final String TAG = "MJFL-CHECK";
    private static final double MB = 1 << 20;

    /**
     * What the self-test needs of the device.
     *
     * @param runtime loads programs: ExecuTorch on a phone, a test double on the JVM
     * @param memory what programs may take (a phone's {@code AndroidMemory})
     * @param peak the process's peak memory
     * @param state the battery and thermal state, as a result's {@code device_state}
     * @param clock times steps and the whole test
     */
    public record Device(ProgramTrainer.Loader runtime, MemoryBudget memory, MemoryProbe peak,
            Supplier<JsonObject> state, Clock clock) {}

    /** How it went: the cases that passed and failed, or why the set could not be read. */
    public record Outcome(boolean passed, List<String> passedCases, List<String> failedCases, String error) {
        public Outcome {
            passedCases = List.copyOf(passedCases);
            failedCases = List.copyOf(failedCases);
        }
    }

    private final Device device;
    private final Consumer<String> out;

    /** @param out takes each line as it is made */
    public SelfTest(Device device, Consumer<String> out) {
        this.device = device;
        this.out = out;
    }

    /**
     * Runs every case of the set in {@code setFolder}, tagging each line with {@code run}.
     *
     * @param workFolder where programs are copied to run, as a run keeps them (the app's own
     *     storage); created if need be
     */
    public Outcome run(String run, Path setFolder, Path workFolder) {
        double started = device.clock().now();
        GoldenSet set;
        try {
            set = GoldenSet.read(setFolder);
            Files.createDirectories(workFolder);
        } catch (IOException | RuntimeException e) {
            String error = describe(e);
            emit(done(run, false, 0, List.of(), started, error));
            return new Outcome(false, List.of(), List.of(), error);
        }
        JsonObject start = line("start", run);
        start.addProperty("set", set.key());
        JsonArray names = new JsonArray();
        set.cases().forEach(names::add);
        start.add("cases", names);
        number(start, "tolerance", set.tolerance());
        start.add("device_state", state());
        emit(start);

        List<String> passed = new ArrayList<>();
        List<String> failed = new ArrayList<>();
        for (String name : set.cases()) {
            JsonObject result = runCase(run, set, name, workFolder);
            (result.get("pass").getAsBoolean() ? passed : failed).add(name);
            emit(result);
        }
        boolean ok = failed.isEmpty() && !passed.isEmpty();
        emit(done(run, ok, passed.size(), failed, started, passed.isEmpty() && failed.isEmpty() ? "the set has no case" : null));
        return new Outcome(ok, passed, failed, null);
    }

    /**
     * The line a start gets while another self-test runs in the same process:
     * {@code {"event":"busy","run":R,"running":OTHER}}.
     */
    public static String busy(String run, String running) {
        JsonObject o = line("busy", run);
        o.addProperty("running", running);
        return o.toString();
    }

    private JsonObject runCase(String run, GoldenSet set, String name, Path workFolder) {
        JsonObject o = line("case", run);
        o.addProperty("case", name);
        boolean reset = device.peak().resetPeak();
        TimedLoader timed = new TimedLoader(device.runtime(), device.clock());
        Path copy = workFolder.resolve(name + ".pte");
        Comparison cmp = null;
        TrainingResult r = null;
        String error = null;
        try {
            GoldenCase c = GoldenCase.read(set.folder().resolve(name), name);
            Files.copy(c.program(), copy, StandardCopyOption.REPLACE_EXISTING);
            try (ProgramTrainer trainer = new ProgramTrainer(timed, device.memory(), device.clock())) {
                r = trainer.train(c.trainingTask(copy), c.batchNormPixels(), () -> false);
            }
            cmp = Comparison.of(r.weights(), r.meanLoss(), c.expected().tensors(), c.expected().meanLoss());
            error = cmp.mismatch();
        } catch (Exception | OutOfMemoryError | LinkageError e) {
            // LinkageError: a runtime whose native library does not load on this phone.
            error = describe(e);
        } finally {
            try {
                Files.deleteIfExists(copy);
            } catch (IOException e) {
                // the next run copies over it
            }
        }
        o.addProperty("pass", error == null && cmp != null && cmp.passes(set.tolerance()));
        number(o, "max_rel_diff", cmp == null ? Double.NaN : cmp.maxRelDiff());
        o.addProperty("worst", cmp == null ? null : cmp.worst());
        number(o, "loss_rel_diff", cmp == null ? Double.NaN : cmp.lossRelDiff());
        List<Double> steps = timed.stepSeconds();
        o.addProperty("steps", steps.size());
        number(o, "step_ms", steps.isEmpty() ? Double.NaN : 1000 * median(steps));
        number(o, "first_step_ms", steps.isEmpty() ? Double.NaN : 1000 * steps.get(0));
        number(o, "compute_s", r == null ? Double.NaN : r.computeS());
        number(o, "planned_mb", timed.plannedBytes() < 0 ? Double.NaN : timed.plannedBytes() / MB);
        long peak = device.peak().peakBytes();
        number(o, "peak_mb", peak < 0 ? Double.NaN : peak / MB);
        o.addProperty("peak_reset", reset);
        o.add("device_state", state());
        o.addProperty("error", error);
        return o;
    }

    private JsonObject done(String run, boolean ok, int passed, List<String> failed, double started, String error) {
        JsonObject o = line("done", run);
        o.addProperty("pass", ok);
        o.addProperty("passed", passed);
        JsonArray f = new JsonArray();
        failed.forEach(f::add);
        o.add("failed", f);
        number(o, "elapsed_s", device.clock().now() - started);
        o.add("device_state", state());
        o.addProperty("error", error);
        return o;
    }

    private JsonObject state() {
        try {
            JsonObject s = device.state().get();
            return s == null ? new JsonObject() : s;
        } catch (RuntimeException e) {
            return new JsonObject(); // the state is a report's extra, never its failure
        }
    }

    private void emit(JsonObject o) {
        out.accept(o.toString());
    }

    private static JsonObject line(String event, String run) {
        JsonObject o = new JsonObject();
        o.addProperty("event", event);
        o.addProperty("run", run);
        return o;
    }

    /** JSON has no NaN or infinity: those are null. */
    private static void number(JsonObject o, String key, double value) {
        if (Double.isFinite(value)) {
            o.addProperty(key, value);
        } else {
            o.add(key, JsonNull.INSTANCE);
        }
    }

    private static double median(List<Double> values) {
        List<Double> sorted = new ArrayList<>(values);
        sorted.sort(null);
        int n = sorted.size();
        return n % 2 == 1 ? sorted.get(n / 2) : (sorted.get(n / 2 - 1) + sorted.get(n / 2)) / 2;
    }

    private static String describe(Throwable e) {
        String m = e.getMessage();
        return e instanceof IOException && m != null ? m : e.getClass().getSimpleName() + (m == null ? "" : ": " + m);
    }
}

package org.mjfl.app.selftest;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.file.Path;
import org.mjfl.app.training.MemoryBudget;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.client.net.Clock;

/**
 * The self-test on the JVM, printing its lines on stdout exactly as the app logs them; what the
 * stand-in adb server serves as a phone's logcat (tests/device/phones/test_selftest.py).
 *
 * <pre>
 * android/app/bin/mjfl-selftest --run R --dir SET --work DIR [--runtime CLASS] [--state JSON]
 * </pre>
 *
 * {@code --runtime} names the {@link ProgramTrainer.Loader} (a public class with a public no-argument
 * constructor) that runs the programs. The default, {@code org.mjfl.app.ExecuTorchRuntime}
 * (app/src/jvmTest), is the app's own ExecuTorch code over the test double of ExecuTorch whose
 * runtime is ExecuTorch's in Python: the zoo's golden set trains as on a phone, with x86's
 * arithmetic. {@code org.mjfl.app.training.FakeProgramLoader} runs softmax-regression programs
 * described in JSON (the JUnit tests' runtime).
 * {@code --state} is the device state the lines report (a phone's battery and thermal state).
 */
public final class SelfTestMain {
    private SelfTestMain() {}

    public static void main(String[] args) throws Exception {
        String run = null;
        String dir = null;
        String work = null;
        String runtime = "org.mjfl.app.ExecuTorchRuntime";
        JsonObject state = new JsonObject();
        for (int i = 0; i < args.length; i++) {
            String value = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--run" -> run = value;
                case "--dir" -> dir = value;
                case "--work" -> work = value;
                case "--runtime" -> runtime = value;
                case "--state" -> state = JsonParser.parseString(value).getAsJsonObject();
                default -> usage("unknown argument " + args[i]);
            }
            i++;
        }
        if (run == null || dir == null || work == null) {
            usage("--run, --dir and --work are needed");
        }
        ProgramTrainer.Loader loader = (ProgramTrainer.Loader) Class.forName(runtime).getConstructor().newInstance();
        JsonObject fixed = state;
        SelfTest.Device device = new SelfTest.Device(loader, MemoryBudget.UNLIMITED, MemoryProbe.proc(),
                () -> fixed.deepCopy(), Clock.SYSTEM);
        new SelfTest(device, line -> {
            System.out.println(line);
            System.out.flush();
        }).run(run, Path.of(dir), Path.of(work));
    }

    private static void usage(String problem) {
        System.err.println("mjfl-selftest: " + problem);
        System.err.println("usage: mjfl-selftest --run R --dir SET --work DIR [--runtime CLASS] [--state JSON]");
        System.exit(2);
    }
}

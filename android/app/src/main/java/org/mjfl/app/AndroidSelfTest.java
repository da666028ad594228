package org.mjfl.app;

import android.content.Context;
import android.util.Log;
import java.util.function.Consumer;
import org.mjfl.app.selftest.MemoryProbe;
import org.mjfl.app.selftest.SelfTest;
import org.mjfl.client.net.Clock;

/**
 * The self-test on this phone, as {@link SelfTestActivity} and the instrumented test run it:
 * ExecuTorch's runtime, the phone's memory budget ({@link AndroidMemory}), the process's peak
 * from /proc, and the battery and thermal state a result reports ({@link AndroidFacts}).
 */
public final class AndroidSelfTest {
    private AndroidSelfTest() {}

    /** A self-test whose lines go to logcat under {@link SelfTest#TAG}, and to {@code also}. */
    public static SelfTest create(Context context, Consumer<String> also) {
        AndroidFacts facts = new AndroidFacts(context, StatusBoard.shared());
        SelfTest.Device device = new SelfTest.Device(ExecuTorchProgram::load, new AndroidMemory(context),
                MemoryProbe.proc(), () -> facts.read().toJson(), Clock.SYSTEM);
        return new SelfTest(device, line -> {
            Log.i(SelfTest.TAG, line);
            also.accept(line);
        });
    }
}

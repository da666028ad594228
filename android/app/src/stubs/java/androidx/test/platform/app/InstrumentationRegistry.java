package androidx.test.platform.app;

import android.app.Instrumentation;

/** Compile-only stub of androidx.test (the instrumented test's API); see src/stubs/README.md. */
public final class InstrumentationRegistry {
    private InstrumentationRegistry() {}

    public static Instrumentation getInstrumentation() {
        throw new UnsupportedOperationException("stub");
    }
}

package androidx.test.ext.junit.runners;

import org.junit.runner.Description;
import org.junit.runner.Runner;
import org.junit.runner.notification.RunNotifier;

/** Compile-only stub of androidx.test (the instrumented test's API); see src/stubs/README.md. */
public final class AndroidJUnit4 extends Runner {
    public AndroidJUnit4(Class<?> klass) {
        throw new UnsupportedOperationException("stub");
    }

    @Override
    public Description getDescription() {
        throw new UnsupportedOperationException("stub");
    }

    @Override
    public void run(RunNotifier notifier) {
        throw new UnsupportedOperationException("stub");
    }
}

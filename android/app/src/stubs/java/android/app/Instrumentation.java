package android.app;

import android.content.Context;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class Instrumentation {
    public Instrumentation() {
        throw new UnsupportedOperationException("stub");
    }

    public Context getContext() {
        throw new UnsupportedOperationException("stub");
    }

    public Context getTargetContext() {
        throw new UnsupportedOperationException("stub");
    }
}

package android.os;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class Handler {
    public Handler(Looper looper) {
        throw new UnsupportedOperationException("stub");
    }

    public final boolean post(Runnable r) {
        throw new UnsupportedOperationException("stub");
    }
}

package android.os;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class Looper {
    Looper() {
        throw new UnsupportedOperationException("stub");
    }

    public static Looper getMainLooper() {
        throw new UnsupportedOperationException("stub");
    }
}

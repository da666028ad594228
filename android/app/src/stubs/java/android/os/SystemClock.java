package android.os;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class SystemClock {
    SystemClock() {
        throw new UnsupportedOperationException("stub");
    }

    public static long elapsedRealtimeNanos() {
        throw new UnsupportedOperationException("stub");
    }
}

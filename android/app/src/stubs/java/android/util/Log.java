package android.util;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class Log {
    private Log() {}

    public static int d(String tag, String msg, Throwable tr) {
        throw new UnsupportedOperationException("stub");
    }

    public static int i(String tag, String msg) {
        throw new UnsupportedOperationException("stub");
    }

    public static int i(String tag, String msg, Throwable tr) {
        throw new UnsupportedOperationException("stub");
    }

    public static int w(String tag, String msg) {
        throw new UnsupportedOperationException("stub");
    }

    public static int w(String tag, String msg, Throwable tr) {
        throw new UnsupportedOperationException("stub");
    }

    public static int e(String tag, String msg, Throwable tr) {
        throw new UnsupportedOperationException("stub");
    }
}

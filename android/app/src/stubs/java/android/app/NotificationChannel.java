package android.app;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class NotificationChannel {
    public NotificationChannel(String id, CharSequence name, int importance) {
        throw new UnsupportedOperationException("stub");
    }
}

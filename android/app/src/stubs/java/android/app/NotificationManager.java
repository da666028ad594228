package android.app;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class NotificationManager {
    public static final int IMPORTANCE_LOW = 2;

    NotificationManager() {
        throw new UnsupportedOperationException("stub");
    }

    public void createNotificationChannel(NotificationChannel channel) {
        throw new UnsupportedOperationException("stub");
    }

    public void notify(int id, Notification notification) {
        throw new UnsupportedOperationException("stub");
    }

    public void cancel(int id) {
        throw new UnsupportedOperationException("stub");
    }
}

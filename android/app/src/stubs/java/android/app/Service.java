package android.app;

import android.content.ContextWrapper;
import android.content.Intent;
import android.os.IBinder;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public abstract class Service extends ContextWrapper {
    public static final int START_STICKY = 1;
    public static final int START_NOT_STICKY = 2;
    public static final int START_REDELIVER_INTENT = 3;
    public static final int STOP_FOREGROUND_REMOVE = 1;
    public static final int START_FLAG_REDELIVERY = 1;

    public Service() {
        super(null);
        throw new UnsupportedOperationException("stub");
    }

    public void onCreate() {
        throw new UnsupportedOperationException("stub");
    }

    public int onStartCommand(Intent intent, int flags, int startId) {
        throw new UnsupportedOperationException("stub");
    }

    public void onDestroy() {
        throw new UnsupportedOperationException("stub");
    }

    public abstract IBinder onBind(Intent intent);

    public final void startForeground(int id, Notification notification) {
        throw new UnsupportedOperationException("stub");
    }

    public final void startForeground(int id, Notification notification, int foregroundServiceType) {
        throw new UnsupportedOperationException("stub");
    }

    public final void stopForeground(int notificationBehavior) {
        throw new UnsupportedOperationException("stub");
    }

    public final boolean stopSelfResult(int startId) {
        throw new UnsupportedOperationException("stub");
    }
}

package android.content;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public abstract class BroadcastReceiver {
    public BroadcastReceiver() {
        throw new UnsupportedOperationException("stub");
    }

    public abstract void onReceive(Context context, Intent intent);
}

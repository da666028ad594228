package android.content;

import java.io.File;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public abstract class Context {
    public Context() {}

    public Context getApplicationContext() {
        throw new UnsupportedOperationException("stub");
    }

    public final <T> T getSystemService(Class<T> serviceClass) {
        throw new UnsupportedOperationException("stub");
    }

    public Intent registerReceiver(BroadcastReceiver receiver, IntentFilter filter) {
        throw new UnsupportedOperationException("stub");
    }

    public void unregisterReceiver(BroadcastReceiver receiver) {
        throw new UnsupportedOperationException("stub");
    }

    public File getFilesDir() {
        throw new UnsupportedOperationException("stub");
    }

    public void startActivity(Intent intent) {
        throw new UnsupportedOperationException("stub");
    }

    public ComponentName startForegroundService(Intent service) {
        throw new UnsupportedOperationException("stub");
    }

    public int checkSelfPermission(String permission) {
        throw new UnsupportedOperationException("stub");
    }

    public File getCacheDir() {
        throw new UnsupportedOperationException("stub");
    }

    public android.content.res.AssetManager getAssets() {
        throw new UnsupportedOperationException("stub");
    }
}

package android.app;

import android.content.Context;
import android.content.Intent;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class PendingIntent {
    public static final int FLAG_IMMUTABLE = 67108864;

    private PendingIntent() {
        throw new UnsupportedOperationException("stub");
    }

    public static PendingIntent getActivity(Context context, int requestCode, Intent intent, int flags) {
        throw new UnsupportedOperationException("stub");
    }
}

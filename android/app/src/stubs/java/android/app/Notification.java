package android.app;

import android.content.Context;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class Notification {
    public Notification() {
        throw new UnsupportedOperationException("stub");
    }

    public static class Builder {
        public Builder(Context context, String channelId) {
            throw new UnsupportedOperationException("stub");
        }

        public Builder setContentTitle(CharSequence title) {
            throw new UnsupportedOperationException("stub");
        }

        public Builder setContentText(CharSequence text) {
            throw new UnsupportedOperationException("stub");
        }

        public Builder setSmallIcon(int icon) {
            throw new UnsupportedOperationException("stub");
        }

        public Builder setContentIntent(PendingIntent intent) {
            throw new UnsupportedOperationException("stub");
        }

        public Builder setOngoing(boolean ongoing) {
            throw new UnsupportedOperationException("stub");
        }

        public Builder setOnlyAlertOnce(boolean onlyAlertOnce) {
            throw new UnsupportedOperationException("stub");
        }

        public Notification build() {
            throw new UnsupportedOperationException("stub");
        }
    }
}

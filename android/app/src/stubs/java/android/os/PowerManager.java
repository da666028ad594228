package android.os;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class PowerManager {
    public static final int PARTIAL_WAKE_LOCK = 1;

    PowerManager() {
        throw new UnsupportedOperationException("stub");
    }

    public WakeLock newWakeLock(int levelAndFlags, String tag) {
        throw new UnsupportedOperationException("stub");
    }

    public int getCurrentThermalStatus() {
        throw new UnsupportedOperationException("stub");
    }

    public final class WakeLock {
        WakeLock() {
            throw new UnsupportedOperationException("stub");
        }

        public void setReferenceCounted(boolean value) {
            throw new UnsupportedOperationException("stub");
        }

        public void acquire() {
            throw new UnsupportedOperationException("stub");
        }

        public void acquire(long timeout) {
            throw new UnsupportedOperationException("stub");
        }

        public void release() {
            throw new UnsupportedOperationException("stub");
        }

        public boolean isHeld() {
            throw new UnsupportedOperationException("stub");
        }
    }
}

package android.app;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class ActivityManager {
    ActivityManager() {
        throw new UnsupportedOperationException("stub");
    }

    public void getMemoryInfo(MemoryInfo outInfo) {
        throw new UnsupportedOperationException("stub");
    }

    public static class MemoryInfo {
        public long availMem;
        public long threshold;
        public long totalMem;

        public MemoryInfo() {
            throw new UnsupportedOperationException("stub");
        }
    }
}

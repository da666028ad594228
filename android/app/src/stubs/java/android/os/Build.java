package android.os;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class Build {
    public static final String MANUFACTURER = null;
    public static final String MODEL = null;
    public static final String[] SUPPORTED_ABIS = null;

    public Build() {
        throw new UnsupportedOperationException("stub");
    }

    public static class VERSION {
        public static final int SDK_INT = 0;
        public static final String RELEASE = null;

        public VERSION() {
            throw new UnsupportedOperationException("stub");
        }
    }

    public static class VERSION_CODES {
        public static final int O = 26;
        public static final int Q = 29;
        public static final int S = 31;
        public static final int TIRAMISU = 33;
        public static final int UPSIDE_DOWN_CAKE = 34;

        public VERSION_CODES() {
            throw new UnsupportedOperationException("stub");
        }
    }
}

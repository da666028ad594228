package android;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class R {
    private R() {}

    public static final class drawable {
        private drawable() {}

        public static final int stat_notify_sync = 17301595;
    }
}

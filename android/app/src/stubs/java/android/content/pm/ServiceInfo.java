package android.content.pm;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class ServiceInfo {
    public static final int FOREGROUND_SERVICE_TYPE_DATA_SYNC = 1;

    public ServiceInfo() {
        throw new UnsupportedOperationException("stub");
    }
}

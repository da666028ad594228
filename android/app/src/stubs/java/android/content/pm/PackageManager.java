package android.content.pm;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public abstract class PackageManager {
    public static final int PERMISSION_GRANTED = 0;
    public static final int PERMISSION_DENIED = -1;

    public PackageManager() {
        throw new UnsupportedOperationException("stub");
    }
}

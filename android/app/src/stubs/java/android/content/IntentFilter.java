package android.content;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class IntentFilter {
    public IntentFilter(String action) {
        throw new UnsupportedOperationException("stub");
    }
}

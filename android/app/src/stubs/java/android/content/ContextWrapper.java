package android.content;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class ContextWrapper extends Context {
    public ContextWrapper(Context base) {
        throw new UnsupportedOperationException("stub");
    }
}

package android.content;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class ComponentName {
    public ComponentName(String pkg, String cls) {
        throw new UnsupportedOperationException("stub");
    }
}

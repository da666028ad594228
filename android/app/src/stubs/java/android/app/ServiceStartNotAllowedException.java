package android.app;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public abstract class ServiceStartNotAllowedException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    ServiceStartNotAllowedException(String message) {
        throw new UnsupportedOperationException("stub");
    }
}

package android.app;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class ForegroundServiceStartNotAllowedException extends ServiceStartNotAllowedException {
    private static final long serialVersionUID = 1L;

    public ForegroundServiceStartNotAllowedException(String message) {
        super(message);
        throw new UnsupportedOperationException("stub");
    }
}

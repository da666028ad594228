package android.os;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public interface IBinder {}

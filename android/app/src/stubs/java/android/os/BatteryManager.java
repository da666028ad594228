package android.os;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class BatteryManager {
    public static final String EXTRA_LEVEL = "level";
    public static final String EXTRA_SCALE = "scale";
    public static final String EXTRA_PLUGGED = "plugged";

    BatteryManager() {
        throw new UnsupportedOperationException("stub");
    }
}

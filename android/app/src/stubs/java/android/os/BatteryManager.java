package android.os;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class BatteryManager {
    public static final String EXTRA_LEVEL = "level";
    public static final String EXTRA_SCALE = "scale";
    public static final String EXTRA_PLUGGED = "plugged";
    public static final String EXTRA_VOLTAGE = "voltage";
    public static final String EXTRA_TEMPERATURE = "temperature";
    public static final String EXTRA_STATUS = "status";
    public static final int BATTERY_PROPERTY_CHARGE_COUNTER = 1;

    BatteryManager() {
        throw new UnsupportedOperationException("stub");
    }

    public int getIntProperty(int id) {
        throw new UnsupportedOperationException("stub");
    }
}

package android.content;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class Intent {
    public static final String ACTION_BATTERY_CHANGED = "android.intent.action.BATTERY_CHANGED";

    public Intent(Context packageContext, Class<?> cls) {
        throw new UnsupportedOperationException("stub");
    }

    public String getAction() {
        throw new UnsupportedOperationException("stub");
    }

    public String getStringExtra(String name) {
        throw new UnsupportedOperationException("stub");
    }

    public int getIntExtra(String name, int defaultValue) {
        throw new UnsupportedOperationException("stub");
    }

    public Intent putExtra(String name, String value) {
        throw new UnsupportedOperationException("stub");
    }
}

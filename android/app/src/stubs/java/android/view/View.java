package android.view;

import android.content.Context;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class View {
    public View(Context context) {
        throw new UnsupportedOperationException("stub");
    }

    public void setPadding(int left, int top, int right, int bottom) {
        throw new UnsupportedOperationException("stub");
    }
}

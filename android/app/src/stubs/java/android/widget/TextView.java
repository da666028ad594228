package android.widget;

import android.content.Context;
import android.view.View;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class TextView extends View {
    public TextView(Context context) {
        super(context);
        throw new UnsupportedOperationException("stub");
    }

    public final void setText(CharSequence text) {
        throw new UnsupportedOperationException("stub");
    }

    public void setTextIsSelectable(boolean selectable) {
        throw new UnsupportedOperationException("stub");
    }
}

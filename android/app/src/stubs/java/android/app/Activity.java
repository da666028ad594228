package android.app;

import android.content.ContextWrapper;
import android.content.Intent;
import android.os.Bundle;
import android.view.View;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public class Activity extends ContextWrapper {
    public Activity() {
        super(null);
        throw new UnsupportedOperationException("stub");
    }

    protected void onCreate(Bundle savedInstanceState) {
        throw new UnsupportedOperationException("stub");
    }

    protected void onStart() {
        throw new UnsupportedOperationException("stub");
    }

    protected void onStop() {
        throw new UnsupportedOperationException("stub");
    }

    protected void onNewIntent(Intent intent) {
        throw new UnsupportedOperationException("stub");
    }

    public Intent getIntent() {
        throw new UnsupportedOperationException("stub");
    }

    public void setIntent(Intent newIntent) {
        throw new UnsupportedOperationException("stub");
    }

    public void setContentView(View view) {
        throw new UnsupportedOperationException("stub");
    }

    public void finish() {
        throw new UnsupportedOperationException("stub");
    }

    public final void runOnUiThread(Runnable action) {
        throw new UnsupportedOperationException("stub");
    }

    public final void requestPermissions(String[] permissions, int requestCode) {
        throw new UnsupportedOperationException("stub");
    }
}

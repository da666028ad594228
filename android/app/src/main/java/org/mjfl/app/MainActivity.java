package org.mjfl.app;

import android.Manifest;
import android.app.Activity;
import android.content.pm.PackageManager;
import android.os.Build;
import android.os.Bundle;
import android.widget.TextView;
import java.util.function.Consumer;

/**
 * The launcher: shows what the device does, nothing more. It reads no extras: any app may start
 * an exported launcher activity, and one that could hand it a url and a device id could point
 * the phone at its own coordinator (docs/security.md). The device is started through
 * {@link StartActivity}, which only the adb shell may start.
 */
public final class MainActivity extends Activity {
    /** The logcat tag of everything the app and client-core log. */
    public static final String TAG = "MJFL";
    private static final int ASK_NOTIFICATIONS = 1;

    private TextView text;
    private final Consumer<StatusBoard.Status> show = s -> runOnUiThread(() -> text.setText(StatusText.of(s)));

    @Override
    protected void onCreate(Bundle savedInstanceState) {
        super.onCreate(savedInstanceState);
        text = new TextView(this);
        text.setPadding(32, 32, 32, 32);
        text.setTextIsSelectable(true);
        setContentView(text);
        if (Build.VERSION.SDK_INT >= Build.VERSION_CODES.TIRAMISU
                && checkSelfPermission(Manifest.permission.POST_NOTIFICATIONS) != PackageManager.PERMISSION_GRANTED) {
            // Without it the service still runs; only its notification stays hidden.
            requestPermissions(new String[] {Manifest.permission.POST_NOTIFICATIONS}, ASK_NOTIFICATIONS);
        }
    }

    @Override
    protected void onStart() {
        super.onStart();
        StatusBoard.shared().listen(show);
    }

    @Override
    protected void onStop() {
        StatusBoard.shared().unlisten(show);
        super.onStop();
    }
}

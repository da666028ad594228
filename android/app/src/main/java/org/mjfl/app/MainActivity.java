package org.mjfl.app;

import android.Manifest;
import android.app.Activity;
import android.content.Intent;
import android.content.pm.PackageManager;
import android.os.Build;
import android.os.Bundle;
import android.util.Log;
import android.widget.TextView;
import java.util.function.Consumer;

/**
 * The launcher: starts {@link DeviceService} with the intent's extras and shows what the device
 * does. Started by hand or over adb:
 *
 * <pre>adb shell am start -n org.mjfl.app/.MainActivity --es url ws://127.0.0.1:8765 --es device_id pixel7-01 --es token s3cret</pre>
 * An enrolled phone gets {@code --es secret S} (its secret, proved in the hello) and, for
 * {@code wss://}, {@code --es pin SHA256} (the coordinator certificate it pins): docs/security.md.
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
        if (savedInstanceState == null) {
            startDevice(getIntent());
        }
    }

    @Override
    protected void onNewIntent(Intent intent) {
        super.onNewIntent(intent);
        setIntent(intent);
        startDevice(intent);
    }

    private void startDevice(Intent intent) {
        String url = intent.getStringExtra(DeviceService.EXTRA_URL);
        String id = intent.getStringExtra(DeviceService.EXTRA_DEVICE_ID);
        String token = intent.getStringExtra(DeviceService.EXTRA_TOKEN);
        if (url == null || id == null) {
            Log.i(TAG, "started without the url and device_id extras; showing the device's status only");
            return;
        }
        Intent service = new Intent(this, DeviceService.class)
                .putExtra(DeviceService.EXTRA_URL, url)
                .putExtra(DeviceService.EXTRA_DEVICE_ID, id)
                .putExtra(DeviceService.EXTRA_TOKEN, token == null ? "" : token)
                .putExtra(DeviceService.EXTRA_SECRET, intent.getStringExtra(DeviceService.EXTRA_SECRET))
                .putExtra(DeviceService.EXTRA_PIN, intent.getStringExtra(DeviceService.EXTRA_PIN));
        startForegroundService(service);
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

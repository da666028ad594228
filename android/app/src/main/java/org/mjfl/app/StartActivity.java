package org.mjfl.app;

import android.app.Activity;
import android.content.Intent;
import android.os.Bundle;
import android.util.Log;

/**
 * How the device is started, over adb: it reads the {@link DeviceRequest} extras, starts
 * {@link DeviceService} with them, shows {@link MainActivity} and finishes (no window of its own).
 *
 * <pre>adb shell am start -n org.mjfl.app/.StartActivity --es url ws://127.0.0.1:8765 --es device_id pixel7-01 --es token s3cret</pre>
 * An enrolled phone gets {@code --es secret S} (its secret, proved in the hello) and, for
 * {@code wss://}, {@code --es pin SHA256} (the coordinator certificate it pins): docs/security.md.
 *
 * <p>The manifest lets only callers holding {@code android.permission.DUMP} start it: the adb
 * shell holds it (AOSP frameworks/base/packages/Shell/AndroidManifest.xml); an installed app
 * cannot, unless someone with adb grants it. So no app on the phone can point the device at
 * another coordinator or take its id.
 */
public final class StartActivity extends Activity {
    @Override
    protected void onCreate(Bundle savedInstanceState) {
        super.onCreate(savedInstanceState);
        Intent intent = getIntent();
        try {
            DeviceRequest request = DeviceRequest.from(intent::getStringExtra);
            startForegroundService(DeviceService.intent(this, request));
            Log.i(MainActivity.TAG, "starting device " + request);
        } catch (IllegalArgumentException e) {
            Log.w(MainActivity.TAG, "not started: " + e.getMessage());
        }
        startActivity(new Intent(this, MainActivity.class));
        finish(); // before onResume returns, as Theme.NoDisplay requires
    }
}

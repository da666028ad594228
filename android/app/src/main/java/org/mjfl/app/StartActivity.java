package org.mjfl.app;

import android.app.Activity;
import android.app.ForegroundServiceStartNotAllowedException;
import android.content.Intent;
import android.os.Build;
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
 *
 * <p>A start Android refuses ({@link ServiceStarts}: asleep or locked on Android 12+, a
 * restricted background start, a missing permission) is one logcat line, never a crash. After a
 * reboot with a screen lock, Android starts no activity of this app (it is not direct-boot aware:
 * its files are in credential-encrypted storage) until the phone is first unlocked: the device
 * waits for that unlock, and `am start` before it fails in adb, not here.
 */
public final class StartActivity extends Activity {
    @Override
    protected void onCreate(Bundle savedInstanceState) {
        super.onCreate(savedInstanceState);
        Intent intent = getIntent();
        try {
            DeviceRequest request = DeviceRequest.from(intent::getStringExtra);
            String refused = ServiceStarts.attempt(() -> startForegroundService(DeviceService.intent(this, request)),
                    StartActivity::notAllowedNow);
            if (refused == null) {
                Log.i(MainActivity.TAG, "starting device " + request);
            } else {
                Log.e(MainActivity.TAG, refused, null);
                StatusBoard.shared().connection(refused);
            }
        } catch (IllegalArgumentException e) {
            Log.w(MainActivity.TAG, "not started: " + e.getMessage());
        }
        startActivity(new Intent(this, MainActivity.class));
        finish(); // before onResume returns, as Theme.NoDisplay requires
    }

    /** Android 12's refusal (the class exists from API 31 on: tested only there). */
    static boolean notAllowedNow(RuntimeException e) {
        return Build.VERSION.SDK_INT >= Build.VERSION_CODES.S && e instanceof ForegroundServiceStartNotAllowedException;
    }
}

package org.mjfl.app;

import android.content.BroadcastReceiver;
import android.content.Context;
import android.content.Intent;
import android.util.Log;

/**
 * Says in logcat (tag MJFL) why a rebooted phone's device does not start yet. The app is not
 * direct-boot aware (its files live in credential-encrypted storage), so after a reboot with a
 * screen lock nothing of it runs, and `am start` fails, until the phone is first unlocked. This
 * receiver alone is direct-boot aware and touches no storage: it only logs.
 */
public final class BootLog extends BroadcastReceiver {
    @Override
    public void onReceive(Context context, Intent intent) {
        String line = ServiceStarts.afterBoot(intent.getAction());
        if (line != null) {
            Log.i(MainActivity.TAG, line);
        }
    }
}

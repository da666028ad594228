package org.mjfl.app;

import android.app.ActivityManager;
import android.content.Context;
import android.content.Intent;
import android.content.IntentFilter;
import android.os.BatteryManager;
import android.os.Build;
import android.os.PowerManager;
import android.util.Log;
import com.google.gson.JsonObject;
import org.mjfl.client.DeviceFacts;
import org.mjfl.client.protocol.Message;

/**
 * What the phone says about itself: the hello's {@code hardware} (model, cores, memory, OS, and
 * the battery and thermal state at connection) and, in every result, its {@code device_state}
 * when the task was answered.
 */
final class AndroidFacts implements DeviceFacts {
    private final Context context;
    private final StatusBoard board;

    AndroidFacts(Context context, StatusBoard board) {
        this.context = context.getApplicationContext();
        this.board = board;
    }

    @Override
    public JsonObject hardware() {
        JsonObject h = new JsonObject();
        h.addProperty("model", Build.MANUFACTURER + " " + Build.MODEL);
        h.addProperty("cores", Runtime.getRuntime().availableProcessors());
        h.addProperty("ram_mb", totalMemoryMb());
        h.addProperty("os", "Android " + Build.VERSION.RELEASE + " (API " + Build.VERSION.SDK_INT + ")");
        h.addProperty("abi", Build.SUPPORTED_ABIS.length > 0 ? Build.SUPPORTED_ABIS[0] : "unknown");
        h.addProperty("trainer", "executorch-android");
        h.add("device_state", read().toJson());
        return h;
    }

    @Override
    public JsonObject resultExtras(Message.Task task) {
        DeviceState state = read();
        board.deviceState(state.describe());
        Log.i(MainActivity.TAG, "task " + task.taskId() + " (" + task.jobId() + " round " + task.round() + "): "
                + state.describe());
        JsonObject extras = new JsonObject();
        extras.add("device_state", state.toJson());
        return extras;
    }

    DeviceState read() {
        // The sticky battery broadcast: no receiver is registered, the last intent comes back.
        Intent battery = context.registerReceiver(null, new IntentFilter(Intent.ACTION_BATTERY_CHANGED));
        Integer pct = null;
        Boolean charging = null;
        if (battery != null) {
            pct = DeviceState.batteryPct(battery.getIntExtra(BatteryManager.EXTRA_LEVEL, -1),
                    battery.getIntExtra(BatteryManager.EXTRA_SCALE, -1));
            int plugged = battery.getIntExtra(BatteryManager.EXTRA_PLUGGED, -1);
            charging = plugged < 0 ? null : plugged != 0;
        }
        Integer thermal = null;
        if (Build.VERSION.SDK_INT >= Build.VERSION_CODES.Q) {
            PowerManager pm = context.getSystemService(PowerManager.class);
            if (pm != null) {
                thermal = pm.getCurrentThermalStatus();
            }
        }
        return new DeviceState(pct, charging, thermal);
    }

    private long totalMemoryMb() {
        ActivityManager am = context.getSystemService(ActivityManager.class);
        if (am == null) {
            return -1;
        }
        ActivityManager.MemoryInfo info = new ActivityManager.MemoryInfo();
        am.getMemoryInfo(info);
        return info.totalMem / (1024 * 1024);
    }
}

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
import java.util.Locale;
import org.mjfl.client.DeviceFacts;
import org.mjfl.client.protocol.Message;

/**
 * What the phone says about itself: the hello's {@code hardware} (model, cores, memory, OS, and
 * the battery and thermal state at connection) and, in every result, its {@code device_state}
 * when the task was answered, with the energy its training took ({@link EnergyTrainer}, {@link
 * BatteryEnergy}).
 */
final class AndroidFacts implements DeviceFacts {
    private final Context context;
    private final StatusBoard board;
    private final EnergyTrainer energy;

    /** Facts without energy (the self-test's). */
    AndroidFacts(Context context, StatusBoard board) {
        this(context, board, null);
    }

    /** @param energy the trainer that measured each task's energy; null: results carry none */
    AndroidFacts(Context context, StatusBoard board, EnergyTrainer energy) {
        this.context = context.getApplicationContext();
        this.board = board;
        this.energy = energy;
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
        JsonObject json = state.toJson();
        BatteryEnergy.Measurement m = energy == null ? null : energy.take(task.taskId());
        if (m != null) {
            m.addTo(json);
            Log.i(MainActivity.TAG, "task " + task.taskId() + ": energy " + (m.energyJ() == null ? "not known"
                    : String.format(Locale.ROOT, "%.1f J", m.energyJ())) + " (" + m.source() + ", resolution "
                    + (m.resolutionJ() == null ? "unknown" : String.format(Locale.ROOT, "%.1f J", m.resolutionJ())) + ")");
        }
        JsonObject extras = new JsonObject();
        extras.add("device_state", json);
        return extras;
    }

    /** The battery now, for {@link BatteryEnergy}; null without a battery broadcast. */
    static BatteryEnergy.Reading battery(Context context) {
        Intent battery = context.registerReceiver(null, new IntentFilter(Intent.ACTION_BATTERY_CHANGED));
        if (battery == null) {
            return null;
        }
        BatteryManager bm = context.getSystemService(BatteryManager.class);
        // MIN_VALUE (API 28+ targets) or 0 when the gauge has no counter; BatteryEnergy handles both.
        int charge = bm == null ? BatteryEnergy.UNSUPPORTED
                : bm.getIntProperty(BatteryManager.BATTERY_PROPERTY_CHARGE_COUNTER);
        return new BatteryEnergy.Reading(charge, battery.getIntExtra(BatteryManager.EXTRA_VOLTAGE, -1),
                battery.getIntExtra(BatteryManager.EXTRA_TEMPERATURE, BatteryEnergy.UNSUPPORTED),
                battery.getIntExtra(BatteryManager.EXTRA_PLUGGED, -1), battery.getIntExtra(BatteryManager.EXTRA_STATUS, -1),
                AndroidClock.ELAPSED.now());
    }

    DeviceState read() {
        // The sticky battery broadcast: no receiver is registered, the last intent comes back.
        Intent battery = context.registerReceiver(null, new IntentFilter(Intent.ACTION_BATTERY_CHANGED));
        Integer pct = null;
        Boolean charging = null;
        String plugType = null;
        if (battery != null) {
            pct = DeviceState.batteryPct(battery.getIntExtra(BatteryManager.EXTRA_LEVEL, -1),
                    battery.getIntExtra(BatteryManager.EXTRA_SCALE, -1));
            int plugged = battery.getIntExtra(BatteryManager.EXTRA_PLUGGED, -1);
            charging = DeviceState.onPower(plugged, battery.getIntExtra(BatteryManager.EXTRA_STATUS, -1));
            plugType = DeviceState.plugType(plugged);
        }
        Integer thermal = null;
        if (Build.VERSION.SDK_INT >= Build.VERSION_CODES.Q) {
            PowerManager pm = context.getSystemService(PowerManager.class);
            if (pm != null) {
                thermal = pm.getCurrentThermalStatus();
            }
        }
        return new DeviceState(pct, charging, plugType, thermal);
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

package org.mjfl.app;

import com.google.gson.JsonObject;
import java.util.Locale;

/**
 * The phone's state when it answers a task: battery level and thermal status. Sent in each
 * result's {@code device_state} and in the hello's {@code hardware}.
 *
 * @param batteryPct {@code 100 * EXTRA_LEVEL / EXTRA_SCALE}, rounded; null if unknown
 * @param charging true when plugged in; null if unknown
 * @param thermalStatus {@code PowerManager.getCurrentThermalStatus()}: 0 none, 1 light,
 *     2 moderate, 3 severe, 4 critical, 5 emergency, 6 shutdown; null before Android 10 (API 29)
 */
public record DeviceState(Integer batteryPct, Boolean charging, Integer thermalStatus) {
    private static final String[] THERMAL = {"none", "light", "moderate", "severe", "critical", "emergency", "shutdown"};

    /** From the sticky ACTION_BATTERY_CHANGED extras; level or scale below 0 means unknown. */
    public static Integer batteryPct(int level, int scale) {
        if (level < 0 || scale <= 0) {
            return null;
        }
        return Math.round(100f * level / scale);
    }

    public JsonObject toJson() {
        JsonObject o = new JsonObject();
        o.addProperty("battery_pct", batteryPct);
        o.addProperty("charging", charging);
        o.addProperty("thermal_status", thermalStatus);
        return o;
    }

    /** "battery 81% (charging), thermal 1 (light)". */
    public String describe() {
        String battery = batteryPct == null ? "battery unknown" : "battery " + batteryPct + "%";
        if (Boolean.TRUE.equals(charging)) {
            battery += " (charging)";
        }
        String thermal = thermalStatus == null ? "thermal unknown"
                : thermalStatus >= 0 && thermalStatus < THERMAL.length
                        ? String.format(Locale.ROOT, "thermal %d (%s)", thermalStatus, THERMAL[thermalStatus])
                        : "thermal " + thermalStatus;
        return battery + ", " + thermal;
    }
}

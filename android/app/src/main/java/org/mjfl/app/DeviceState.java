package org.mjfl.app;

import com.google.gson.JsonObject;
import java.util.Locale;

/**
 * The phone's state when it answers a task: battery level, power and thermal status. Sent in each
 * result's {@code device_state} and in the hello's {@code hardware}.
 *
 * @param batteryPct {@code 100 * EXTRA_LEVEL / EXTRA_SCALE}, rounded; null if unknown
 * @param charging true when on power ({@link #onPower}); null if unknown
 * @param plugged what powers it ({@link #plugType}): "ac", "usb", "wireless", "dock" or "none";
 *     null if unknown
 * @param thermalStatus {@code PowerManager.getCurrentThermalStatus()}: 0 none, 1 light,
 *     2 moderate, 3 severe, 4 critical, 5 emergency, 6 shutdown; null before Android 10 (API 29)
 */
public record DeviceState(Integer batteryPct, Boolean charging, String plugged, Integer thermalStatus) {
    /** {@code BatteryManager.BATTERY_PLUGGED_*}, the bits of {@code EXTRA_PLUGGED}. */
    static final int PLUGGED_AC = 1;
    static final int PLUGGED_USB = 2;
    static final int PLUGGED_WIRELESS = 4;
    static final int PLUGGED_DOCK = 8;
    /** {@code BatteryManager.BATTERY_STATUS_CHARGING}, a value of {@code EXTRA_STATUS}. */
    static final int STATUS_CHARGING = 2;

    private static final String[] THERMAL = {"none", "light", "moderate", "severe", "critical", "emergency", "shutdown"};

    /** From the sticky ACTION_BATTERY_CHANGED extras; level or scale below 0 means unknown. */
    public static Integer batteryPct(int level, int scale) {
        if (level < 0 || scale <= 0) {
            return null;
        }
        return Math.round(100f * level / scale);
    }

    /** {@code EXTRA_PLUGGED} as a word; null when below 0 (unknown) or no bit Android defines. */
    public static String plugType(int plugged) {
        if (plugged < 0) {
            return null;
        }
        if (plugged == 0) {
            return "none";
        }
        if ((plugged & PLUGGED_AC) != 0) {
            return "ac";
        }
        if ((plugged & PLUGGED_USB) != 0) {
            return "usb";
        }
        if ((plugged & PLUGGED_WIRELESS) != 0) {
            return "wireless";
        }
        return (plugged & PLUGGED_DOCK) != 0 ? "dock" : null;
    }

    /**
     * Whether a charger feeds the phone: {@code EXTRA_PLUGGED != 0}, or {@code EXTRA_STATUS}
     * CHARGING while {@code EXTRA_PLUGGED} says 0. The second is {@code dumpsys battery unplug}:
     * it fakes the plug extras only, the status still comes from the charger's hardware. (The sign
     * of {@code BATTERY_PROPERTY_CURRENT_NOW} would tell too, but vendors disagree on it.)
     *
     * @return null when neither extra is known
     */
    public static Boolean onPower(int plugged, int status) {
        if (plugged > 0 || status == STATUS_CHARGING) {
            return true;
        }
        return plugged < 0 ? null : false;
    }

    public JsonObject toJson() {
        JsonObject o = new JsonObject();
        o.addProperty("battery_pct", batteryPct);
        o.addProperty("charging", charging);
        o.addProperty("plugged", plugged);
        o.addProperty("thermal_status", thermalStatus);
        return o;
    }

    /** "battery 81% (charging, usb), thermal 1 (light)". */
    public String describe() {
        String battery = batteryPct == null ? "battery unknown" : "battery " + batteryPct + "%";
        if (Boolean.TRUE.equals(charging)) {
            battery += plugged == null ? " (charging)" : " (charging, " + plugged + ")";
        }
        String thermal = thermalStatus == null ? "thermal unknown"
                : thermalStatus >= 0 && thermalStatus < THERMAL.length
                        ? String.format(Locale.ROOT, "thermal %d (%s)", thermalStatus, THERMAL[thermalStatus])
                        : "thermal " + thermalStatus;
        return battery + ", " + thermal;
    }
}
